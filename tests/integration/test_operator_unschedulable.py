"""Pods no node takes (no node with the cards, CPU or memory they ask for): the model
says so in the scheduler's own words, in status, an Event and a metric, while it waits;
and says it no more once they run."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration

SAID = "0/1 nodes are available: 1 Insufficient ibm.com/spyre_pf."


def parse_time(rfc3339: str) -> datetime:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))


def compiling(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    st = sim.status(kube, namespace, name)
    return st if sim.condition(st, "CacheReady")[1] == "Compiling" else None


def compiled(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    st = sim.status(kube, namespace, name)
    return st if (st.get("cache") or {}).get("ok") else None


def waits(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    st = sim.status(kube, namespace, name)
    return st if sim.condition(st, "Ready")[1] == "Unschedulable" else None


def test_a_compile_and_a_replica_no_node_takes_say_why(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = sim.model(namespace, "m")
    sim.create(kube, doc)
    job = sim.compile_job(kube, doc)
    pod = simulate.unschedulable_pod(kube, "Job", namespace, job, SAID)
    st = sim.wait_for(lambda: waits(kube, namespace, "m"), "Ready reason Unschedulable")
    assert st["phase"] == "Compiling"
    ready = sim.condition(st, "Ready")
    assert ready[2].endswith(f"pod {pod}: {SAID}") and sim.condition(st, "CacheReady") == ready
    assert ("Warning", "Unschedulable") in sim.events_for(kube, namespace, "m")
    series = f'spyre_operator_unschedulable{{kind="SpyreModel",namespace="{namespace}",name="m"'
    sim.wait_for(lambda: operator.metrics().get(f'{series},role="compile"}}'), "the metric")
    # placed, and started by a node 5 minutes after it was made: the wait is in status
    made = kube.get("Pod", namespace, pod)["metadata"]["creationTimestamp"]
    started = (parse_time(made) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    running = {"phase": "Running", "startTime": started, "conditions": []}
    kube.patch("Pod", namespace, pod, {"status": running}, sub="status")
    st = sim.wait_for(lambda: compiling(kube, namespace, "m"), "CacheReady Compiling")
    assert st["cache"]["pendingSeconds"] == 300
    assert sim.condition(st, "CacheReady")[2].endswith(", with 5m00s waiting for a node")
    # the compile done (its pods gone meanwhile): the wait is kept beside its seconds
    kube.delete("Pod", namespace, pod)
    simulate.complete_job(kube, namespace, job)
    st = sim.wait_for(lambda: compiled(kube, namespace, "m"), "the cache compiled")
    assert st["cache"]["pendingSeconds"] == 300
    sim.wait_for(lambda: kube.get("Deployment", namespace, "m"), "the Deployment")
    server = simulate.unschedulable_pod(kube, "Deployment", namespace, "m", SAID)
    st = sim.wait_for(lambda: waits(kube, namespace, "m"), "a replica no node takes")
    assert sim.condition(st, "Available")[1] == "Unschedulable" and st["phase"] == "Starting"
    sim.wait_for(lambda: operator.metrics().get(f'{series},role="serve"}}'), "the serve metric")
    kube.delete("Pod", namespace, server)
    simulate.make_deployment_available(kube, namespace, "m")
    sim.wait_phase(kube, namespace, "m", "Ready")
    sim.wait_for(lambda: f"{series}," not in operator.metrics_text() or None, "the metric gone")
