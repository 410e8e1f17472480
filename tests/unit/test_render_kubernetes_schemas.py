"""The rendered children of every example (as they are, and with the pass-through fields
of current Kubernetes set) against the OpenAPI schemas of Kubernetes 1.30 and of the
newest release kubernetes-validate ships, strict (a field the schema lacks is an error):
the test API server is 1.20, which would drop a newer field silently (issue 31)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from apilib import EXAMPLES, load_example, merge, pinned
from test_api_kubernetes_types import CURRENT

from spyre_operator.api.crd import build_cache_crd, build_crd
from spyre_operator.api.validation import parse
from spyre_operator.render.children import build_cleanup_job, desired

pytestmark = pytest.mark.unit

OLDEST = "1.30"
NEWEST = kubernetes_validate.latest_version()
VERSIONS = [OLDEST, NEWEST]


def with_pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects, and a Pod from each pod template (what the controllers create)."""
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": o["spec"]["template"]["spec"],
        }
        for o in objects
        if "template" in o.get("spec", {})
    ]
    return objects + pods


def rendered(doc: dict[str, Any]) -> list[dict[str, Any]]:
    model = parse(pinned(doc))
    objects = []
    for platform in ("kubernetes", "openshift"):
        want = desired(model, "0a0a0a0a-0000-0000-0000-000000000000", platform)
        objects += want.objects()
        objects.append(build_cleanup_job(model, "0a0a0a0a-0000-0000-0000-000000000000", platform))
    return with_pods(objects)


def check(objects: list[dict[str, Any]], version: str) -> list[str]:
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            where = ".".join(map(str, err.path))
            errors.append(f"{obj['kind']} {obj['metadata'].get('name')}: {where}: {err.message}")
    return errors


def test_the_newest_schemas_are_newer_than_the_oldest_checked() -> None:
    assert tuple(map(int, NEWEST.split("."))) >= (1, 37)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("current", [False, True], ids=["as written", "current fields"])
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_examples_children_follow_the_kubernetes_schema(
    example: Path, current: bool, version: str
) -> None:
    doc = load_example(example)
    if current:
        doc = merge(doc, {"spec": CURRENT})
    objects = rendered(doc)
    assert {"Deployment", "Pod"} <= {o["kind"] for o in objects}
    assert check(objects, version) == []


def test_a_field_the_schema_lacks_is_found() -> None:
    """The check can fail: a field Kubernetes does not know is an error in strict mode."""
    (deployment, *_) = [o for o in rendered(load_example(EXAMPLES[0])) if o["kind"] == "Deployment"]
    deployment["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "minDomain": 2}
    ]
    (error,) = check([deployment], NEWEST)
    assert "minDomain" in error


@pytest.mark.parametrize("version", VERSIONS)
def test_the_crds_follow_the_apiextensions_schema(version: str) -> None:
    assert check([build_crd(), build_cache_crd()], version) == []
