"""A cache registry in the rendered Jobs (render/sharing.py): the compile Job carries the
registry's env and Secret (it publishes), the pull Job fetches the key with no card and
one attempt; without a registry nothing changes. The settings that turn it on refuse a
wrong repository or Secret with what to give instead."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
from apilib import example, merge, pinned

from spyre_operator.api.runtimes import CacheSharing
from spyre_operator.api.validation import parse, validate_spec
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.children import desired
from spyre_operator.render.sharing import sharing_for
from spyre_operator.settings import Settings, SettingsError, from_env
from spyre_runtime import contract

pytestmark = pytest.mark.unit

UID = "0a0a0a0a-0000-0000-0000-000000000000"
SHARING = CacheSharing("registry.example.com:5000/spyre/caches", "registry-creds")


def env_of(job: dict[str, Any]) -> dict[str, str]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_compile_job_publishes_and_a_pull_job_comes_first() -> None:
    model = parse(pinned(example("granite-3.3-8b-instruct")))
    plain = desired(model, UID)
    want = desired(model, UID, sharing=SHARING)
    assert want.pull is not None and want.job is not None and plain.pull is None
    assert [o["metadata"]["name"] for o in want.objects()][:3] == [
        o["metadata"]["name"] for o in (want.pvc, want.weights, want.pull) if o
    ]
    registry_env = {
        contract.SPYRE_SERVING_CACHE_REGISTRY: SHARING.repository,
        contract.SPYRE_SERVING_CACHE_REGISTRY_AUTH: "/etc/spyre-registry/.dockerconfigjson",
        contract.SPYRE_SERVING_CACHE_REGISTRY_CA: "/etc/spyre-registry/ca.crt",
    }
    assert plain.job is not None
    assert env_of(want.job) == env_of(plain.job) | registry_env
    for job in (want.job, want.pull):
        pod = job["spec"]["template"]["spec"]
        assert {"name": "cache-registry", "mountPath": "/etc/spyre-registry", "readOnly": True} in (
            pod["containers"][0]["volumeMounts"]
        )
        volume = {"secretName": "registry-creds", "optional": True, "defaultMode": 0o444}
        assert {"name": "cache-registry", "secret": volume} in pod["volumes"]

    key = cache_key(
        model.spec, pinned(example("granite-3.3-8b-instruct"))["spec"]["model"]["revision"]
    )
    pull = want.pull
    assert pull["metadata"]["name"] == meta.pull_job_name(key) == f"spyre-pull-{key[:12]}"
    assert pull["metadata"]["annotations"][meta.CACHE_KEY_ANNOTATION] == key
    assert pull["spec"]["backoffLimit"] == 0
    (ref,) = pull["metadata"]["ownerReferences"]
    assert ref["uid"] == UID and ref["controller"] is False
    (container,) = pull["spec"]["template"]["spec"]["containers"]
    assert (container["name"], container["args"]) == ("pull", ["pull"])
    assert env_of(pull) == {
        contract.SPYRE_SERVING_CACHE_KEY: key,
        contract.SPYRE_SERVING_CACHE_ROOT: "/var/cache/spyre",
        "HOME": "/home/spyre",
        **registry_env,
    }
    cards = model.spec.accelerator.resource_name
    assert all(cards not in amounts for amounts in container["resources"].values())


def test_without_a_secret_the_jobs_pull_anonymously_and_without_a_registry_nothing_changes() -> (
    None
):
    model = parse(example("micro-granite-cpu"))
    want = desired(model, UID, sharing=CacheSharing("127.0.0.1:5000/caches"))
    assert want.pull is not None and want.job is not None
    assert env_of(want.pull)[contract.SPYRE_SERVING_CACHE_REGISTRY] == "127.0.0.1:5000/caches"
    assert contract.SPYRE_SERVING_CACHE_REGISTRY_AUTH not in env_of(want.pull)
    assert not [v for v in want.pull["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    assert desired(model, UID) == desired(model, UID, sharing=None)


@pytest.mark.parametrize("platform", ["kubernetes", "openshift"])
def test_the_pull_job_validates_against_kubernetes(platform: str) -> None:
    model = parse(example("micro-granite-cpu"))
    pull = desired(model, UID, platform, sharing=SHARING).pull
    assert pull is not None
    kubernetes_validate.validate(pull, kubernetes_validate.latest_version(), strict=True)


def test_the_settings_turn_it_on_and_refuse_a_wrong_repository_or_secret() -> None:
    assert Settings().cache_sharing is None
    on = from_env(
        {
            "SPYRE_OPERATOR_CACHE_REGISTRY": SHARING.repository,
            "SPYRE_OPERATOR_CACHE_REGISTRY_SECRET": "registry-creds",
        }
    )
    assert on.cache_sharing == SHARING
    for environ, said in [
        ({"SPYRE_OPERATOR_CACHE_REGISTRY": "https://r.example/x"}, "is not a repository"),
        ({"SPYRE_OPERATOR_CACHE_REGISTRY": "r.example/x:tag"}, "no scheme, tag or digest"),
        ({"SPYRE_OPERATOR_CACHE_REGISTRY_SECRET": "s"}, "needs --cache-registry"),
        (
            {
                "SPYRE_OPERATOR_CACHE_REGISTRY": "r.example/x",
                "SPYRE_OPERATOR_CACHE_REGISTRY_SECRET": "S!",
            },
            "'S!': not a Secret's name",
        ),
    ]:
        with pytest.raises(SettingsError, match=re.escape(said)):
            from_env(environ)


def with_registry(registry: dict[str, Any]) -> Any:
    return parse(merge(example("micro-granite-cpu"), {"spec": {"cache": {"registry": registry}}}))


def test_the_spec_overrides_the_operators_registry_and_never_the_cache_key() -> None:
    operator = CacheSharing("registry.example.com/spyre/caches", "operator-creds")
    own = with_registry({"repository": "other.example:443/team/caches", "secretName": "mine"})
    assert sharing_for(own.spec, operator) == CacheSharing("other.example:443/team/caches", "mine")
    assert sharing_for(own.spec, None) == CacheSharing("other.example:443/team/caches", "mine")
    secret_only = with_registry({"secretName": "mine"})
    assert sharing_for(secret_only.spec, operator) == CacheSharing(operator.repository, "mine")
    assert sharing_for(secret_only.spec, None) is None  # no repository anywhere
    off = with_registry({"enabled": False})
    assert sharing_for(off.spec, operator) is None
    assert desired(off, UID, sharing=operator).pull is None
    plain = parse(example("micro-granite-cpu"))
    assert cache_key(own.spec) == cache_key(off.spec) == cache_key(plain.spec)
    pulled = desired(own, UID).pull
    assert pulled is not None
    assert env_of(pulled)[contract.SPYRE_SERVING_CACHE_REGISTRY] == "other.example:443/team/caches"


@pytest.mark.parametrize(
    "repository", ["https://r.example/x", "r.example/x:tag", "r.example/UPPER", "r.example"]
)
def test_a_spec_repository_that_is_not_one_is_refused(repository: str) -> None:
    doc = merge(
        example("micro-granite-cpu"), {"spec": {"cache": {"registry": {"repository": repository}}}}
    )
    spec, problems = validate_spec(doc["spec"])
    assert spec is None
    assert [p.path for p in problems] == ["spec.cache.registry.repository"], problems
