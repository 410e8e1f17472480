"""A SpyreModel as Flux, kpt and every kstatus reader see it (tests/kstatus_rules.py, the
rules of kubernetes-sigs/cli-utils pkg/kstatus/README.md), from its live status on the API
server: InProgress while it downloads, compiles and starts, Current once Ready and never
before, Failed when its spec is invalid or its compile failed."""

from __future__ import annotations

from typing import Any

import cluster_sim as sim
import pytest

from kstatus_rules import kstatus
from spyre_devcluster import simulate
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration


class Seen:
    """(phase, kstatus) of each status the operator wrote, in order."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.all: list[tuple[str, str]] = []

    def at(self, phase: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            obj = sim.get(self.kube, self.namespace, self.name)
            status = obj.get("status") or {}
            if status.get("observedGeneration") is not None:  # written by the operator
                now = (status.get("phase", ""), kstatus(obj))
                if not self.all or self.all[-1] != now:
                    self.all.append(now)
            return obj if status.get("phase") == phase else None

        return sim.wait_for(probe, f"{self.name} {phase}")


def test_in_progress_until_ready_then_current(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = sim.model(namespace, "m")
    created = sim.create(kube, doc)  # before the operator saw it: the CRD's status default
    assert created["status"] == {"observedGeneration": 0} and kstatus(created) == "InProgress"
    seen = Seen(kube, namespace, "m")
    seen.at("Downloading")
    sim.download(kube, doc)
    seen.at("Compiling")
    job = sim.job_name(doc)
    sim.wait_for(lambda: kube.get("Job", namespace, job), f"Job {job}")
    simulate.complete_job(kube, namespace, job)
    seen.at("Starting")
    simulate.make_deployment_available(kube, namespace, "m")
    ready = seen.at("Ready")
    sim.wait_for(lambda: kstatus(sim.get(kube, namespace, "m")) == "Current" or None, "Current")
    assert kstatus(ready) in ("InProgress", "Current")  # Ready, and the rollout done
    before = [k for phase, k in seen.all if phase != "Ready"]
    assert before and set(before) == {"InProgress"}, seen.all
    conditions = {c["type"]: c for c in sim.get(kube, namespace, "m")["status"]["conditions"]}
    assert (conditions["Reconciling"]["status"], conditions["Stalled"]["status"]) == (
        "False",
        "False",
    )
    assert conditions["Reconciling"]["observedGeneration"] == 1


def test_failed_when_invalid_or_when_the_compile_failed(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    sim.create(
        kube, sim.model(namespace, "bad", sim.example(env=[{"name": "VLLM_PLUGINS", "value": "x"}]))
    )
    invalid = sim.wait_phase(kube, namespace, "bad", "Invalid")
    assert kstatus(sim.get(kube, namespace, "bad")) == "Failed", invalid
    doc = sim.model(namespace, "oom")
    sim.create(kube, doc)
    sim.download(kube, doc)
    sim.wait_phase(kube, namespace, "oom", "Compiling")
    assert kstatus(sim.get(kube, namespace, "oom")) == "InProgress"
    job = sim.job_name(doc)
    sim.wait_for(lambda: kube.get("Job", namespace, job), f"Job {job}")
    simulate.finish_job(kube, namespace, job, exit_code=137, message="", reason="OOMKilled")
    sim.wait_phase(kube, namespace, "oom", "Failed")
    stalled = {c["type"]: c for c in sim.get(kube, namespace, "oom")["status"]["conditions"]}[
        "Stalled"
    ]
    assert (stalled["status"], stalled["reason"]) == ("True", "OOMKilled")
    assert kstatus(sim.get(kube, namespace, "oom")) == "Failed"
