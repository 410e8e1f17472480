"""What the operator writes is what `spyre-operator render` prints: every example, applied
the documented way, reaches a Deployment and Service equal to render's output; and a field
removed from a live SpyreModel leaves its Deployment (server-side apply)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import cluster_sim as sim
import pytest
import yaml

from spyre_devcluster import simulate
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import Kube
from spyre_operator.render import meta
from spyre_operator.render.children import desired
from spyre_operator.render.weights_job import is_commit

pytestmark = pytest.mark.integration

EXAMPLES = sorted(p for p in (sim.ROOT / "examples").iterdir() if p.is_file())
COMMIT = "c0ffee0000000000000000000000000000c0ffee"


def render(path: Path, namespace: str, uid: str, commit: str | None) -> dict[str, dict[str, Any]]:
    """`spyre-operator render` as a user runs it, by kind (Jobs: by component, weights or
    compile)."""
    args = ["render", "--namespace", namespace, "--uid", uid, str(path)]
    args += ["--commit", commit] if commit else []
    out = subprocess.run(
        [sys.executable, "-m", "spyre_operator", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return {
        doc["metadata"]["labels"]["app.kubernetes.io/component"] if doc["kind"] == "Job"
        else doc["kind"]: doc
        for doc in yaml.safe_load_all(out)
    }  # fmt: skip


def owned_part(live: Any, want: Any) -> Any:
    """The part of `live` at the paths `want` sets: what the operator wrote, without the
    API server's defaults (list items by position: a written list keeps its order)."""
    if isinstance(want, dict) and isinstance(live, dict):
        return {k: owned_part(live.get(k), v) for k, v in want.items()}
    if isinstance(want, list) and isinstance(live, list) and len(want) == len(live):
        return [owned_part(h, w) for h, w in zip(live, want, strict=True)]
    return live


def applied(kube: Kube, kind: str, want: dict[str, Any], owner: str) -> dict[str, Any]:
    """The live object once it carries the wanted manifest's hash; a refused write fails
    at once with the API server's message."""
    namespace, name = want["metadata"]["namespace"], want["metadata"]["name"]
    digest = want["metadata"]["annotations"][meta.APPLIED_ANNOTATION]

    def probe() -> dict[str, Any] | None:
        live = kube.get(kind, namespace, name)
        if live and live["metadata"].get("annotations", {}).get(meta.APPLIED_ANNOTATION) == digest:
            return live
        degraded = sim.condition(sim.status(kube, namespace, owner), "Degraded")
        assert degraded[1] != "ApplyFailed", degraded[2]
        return None

    found: dict[str, Any] = sim.wait_for(probe, f"{kind} {name} has the manifest {digest}")
    return found


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_reconciles_to_what_render_prints(
    path: Path, kube: Kube, namespace: str, operator: sim.Operator, kubectl: Any
) -> None:
    kubectl("apply", "-n", namespace, "-f", str(path))  # as the README says
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    live_model = sim.get(kube, namespace, name)
    spec = parse(live_model).spec
    # A hub revision that is not a commit resolves to COMMIT here.
    commit = COMMIT if spec.model.from_hub and not is_commit(spec.model.revision) else None
    want = render(path, namespace, live_model["metadata"]["uid"], commit)

    if spec.model.from_hub:
        weights = want["weights"]["metadata"]["name"]
        live = sim.wait_for(lambda: kube.get("Job", namespace, weights), f"Job {weights} exists")
        assert owned_part(live, want["weights"]) == want["weights"]
        sim.download(kube, live_model, commit)
    job = want["compile"]["metadata"]["name"]
    entry = meta.inventory_name(
        want["compile"]["metadata"]["annotations"][meta.CACHE_KEY_ANNOTATION]
    )
    sim.wait_for(
        lambda: sim.job_owners(kube, namespace, job) == {name, entry}, "the model and the entry"
    )
    live_job = kube.get("Job", namespace, job) or {}
    # what render prints, and the key's inventory entry as the other owner
    refs = live_job["metadata"]["ownerReferences"]
    live_job["metadata"]["ownerReferences"] = [r for r in refs if r["name"] != entry]
    assert owned_part(live_job, want["compile"]) == want["compile"]
    if "PersistentVolumeClaim" in want:
        pvc = want["PersistentVolumeClaim"]
        live_pvc = kube.get("PersistentVolumeClaim", namespace, pvc["metadata"]["name"])
        assert owned_part(live_pvc, pvc) == pvc
    simulate.complete_job(kube, namespace, job)  # the kubelet's and Job controller's part

    for kind in ("Deployment", "Service"):
        live = applied(kube, kind, want[kind], name)
        assert owned_part(live, want[kind]) == want[kind], kind


def test_fields_removed_from_the_spec_leave_the_deployment(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    gone = {"key": "spyre.example/gone", "operator": "Exists", "effect": "NoSchedule"}
    kept = {"key": "spyre.example/kept", "operator": "Exists", "effect": "NoSchedule"}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    doc = sim.model(namespace, "placed")
    doc["spec"] |= {
        "nodeSelector": {"zone": "a"},
        "schedulerName": "spyre-scheduler",
        "affinity": affinity,
        "tolerations": [gone, kept],
        # graph-neutral names: removing one changes the Deployment, not the cache key
        "env": [
            {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
            {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        ],
    }
    sim.create(kube, doc)
    uid = sim.get(kube, namespace, "placed")["metadata"]["uid"]
    want = desired(parse(doc), uid)
    assert want.job is not None and want.deployment is not None
    sim.download(kube, doc)
    job = want.job["metadata"]["name"]
    sim.wait_for(lambda: kube.get("Job", namespace, job), "the compile Job exists")
    simulate.complete_job(kube, namespace, job)
    pod = applied(kube, "Deployment", want.deployment, "placed")["spec"]["template"]["spec"]
    assert (pod["nodeSelector"], pod["schedulerName"]) == ({"zone": "a"}, "spyre-scheduler")
    assert pod["affinity"] == affinity and pod["tolerations"] == [gone, kept]

    removal = {
        "nodeSelector": None,
        "schedulerName": None,
        "affinity": None,
        "tolerations": [kept],
        "env": [{"name": "VLLM_NO_USAGE_STATS", "value": "1"}],
    }
    sim.spec_patch(kube, namespace, "placed", removal)
    now = sim.get(kube, namespace, "placed")
    deploy = applied(kube, "Deployment", desired(parse(now), uid).deployment, "placed")
    pod = deploy["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod
    # Kubernetes 1.20's apply keeps the emptied struct (affinity: {nodeAffinity: {}}): no
    # constraint is left, which is what matters to the scheduler.
    assert not any((pod.get("affinity") or {}).values()), pod["affinity"]
    assert pod["schedulerName"] == "default-scheduler"  # the API server's default, not ours
    assert pod["tolerations"] == [kept]
    env = {e["name"] for e in pod["containers"][0]["env"]}
    assert "VLLM_NO_USAGE_STATS" in env and "VLLM_LOGGING_LEVEL" not in env
