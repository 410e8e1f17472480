"""SpyreModels and SpyreCaches as Flux and kpt see them: Flux's own kstatus library
(sigs.k8s.io/cli-utils, through our reader: tests/kstatuslib.py) on their live objects, in
each phase, against docs/api.md's tables (parsed: the doc is the one source). Every
(phase, kstatus) seen on the way is one the table allows; each phase settles on the
table's value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cluster_sim import Operator, create, download, example, job_name, model, wait_for
from test_operator_caches import precompile

from kstatuslib import Documented, Kstatus, documented, reader
from spyre_devcluster import simulate
from spyre_operator.api.names import CACHE_KIND, KIND
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration

INVALID_ENV = [{"name": "VLLM_PLUGINS", "value": "x"}]  # a name the operator owns


@pytest.fixture(scope="module")
def kstatus(kubeconfig: Path) -> Kstatus:
    return Kstatus(reader(), kubeconfig)


class Walk:
    """One kind's objects through their phases: each (phase, kstatus) read is recorded."""

    def __init__(self, kstatus: Kstatus, namespace: str, kind: str) -> None:
        self.kstatus, self.namespace, self.kind = kstatus, namespace, kind
        self.table: Documented = documented(kind)
        self.seen: set[tuple[str, str]] = set()

    def read(self, name: str) -> tuple[str, str]:
        phase, said = self.kstatus(self.kind, self.namespace, name)
        if phase:  # "" until the operator's first status write
            self.seen.add((phase, said))
        return phase, said

    def settles(self, name: str, phase: str) -> None:
        """Wait until `name` is in `phase` and kstatus says what the table says of it."""
        wanted = (phase, self.table.settled[phase])
        last: list[tuple[str, str]] = []

        def probe() -> bool:
            last[:] = [self.read(name)]
            return last[0] == wanted

        try:
            wait_for(probe, f"{self.kind} {name}: {wanted}")
        except simulate.Timeout as timeout:
            raise simulate.Timeout(f"{timeout}; kstatus last read {last}") from None

    def check(self, phases: set[str]) -> None:
        assert {phase for phase, _ in self.seen} >= phases, self.seen
        wrong = {(p, s) for p, s in self.seen if s not in self.table.allowed.get(p, set())}
        assert not wrong, f"kstatus read {wrong}; docs/api.md allows {self.table.allowed}"


def test_a_model_the_operator_has_not_seen_is_in_progress(
    kube: Kube, namespace: str, kstatus: Kstatus
) -> None:
    simulate.install_crds(kube)
    create(kube, model(namespace, "unseen"))  # no operator: the CRD's status default only
    assert kstatus(KIND, namespace, "unseen") == ("", "InProgress")


def compiling(kube: Kube, walk: Walk, doc: dict[str, Any], name: str) -> str:
    """`name` (a SpyreModel or SpyreCache of `doc`'s spec) downloads, then compiles: the
    compile Job's name."""
    walk.settles(name, "Downloading")
    download(kube, doc)
    return compile_job(kube, walk, doc, name)


def compile_job(kube: Kube, walk: Walk, doc: dict[str, Any], name: str) -> str:
    walk.settles(name, "Compiling")
    job = job_name(doc)
    wait_for(lambda: kube.get("Job", walk.namespace, job), f"Job {job}")
    return job


def oom(kube: Kube, namespace: str, job: str) -> None:
    simulate.finish_job(kube, namespace, job, exit_code=137, message="", reason="OOMKilled")


def test_a_model_is_in_progress_until_ready_then_current(
    kube: Kube, namespace: str, operator: Operator, kstatus: Kstatus
) -> None:
    walk = Walk(kstatus, namespace, KIND)
    doc = model(namespace, "m")
    create(kube, doc)
    simulate.complete_job(kube, namespace, compiling(kube, walk, doc, "m"))
    walk.settles("m", "Starting")
    simulate.make_deployment_available(kube, namespace, "m")
    walk.settles("m", "Ready")
    walk.check({"Downloading", "Compiling", "Starting", "Ready"})


def test_a_model_failed_or_invalid_reads_failed(
    kube: Kube, namespace: str, operator: Operator, kstatus: Kstatus
) -> None:
    walk = Walk(kstatus, namespace, KIND)
    create(kube, model(namespace, "bad", example(env=INVALID_ENV)))
    walk.settles("bad", "Invalid")
    doc = model(namespace, "oom")
    create(kube, doc)
    oom(kube, namespace, compiling(kube, walk, doc, "oom"))
    walk.settles("oom", "Failed")
    walk.check({"Invalid", "Downloading", "Compiling", "Failed"})


def test_each_phase_of_a_cache_reads_as_the_table_says(
    kube: Kube, namespace: str, operator: Operator, kstatus: Kstatus
) -> None:
    walk = Walk(kstatus, namespace, CACHE_KIND)
    served = model(namespace, "later")
    create(kube, precompile(namespace, "ahead", served))
    simulate.complete_job(kube, namespace, compiling(kube, walk, served, "ahead"))
    walk.settles("ahead", "Ready")
    create(kube, precompile(namespace, "bad", example(env=INVALID_ENV)))
    walk.settles("bad", "Invalid")
    other = model(namespace, "other")
    other["spec"]["batching"]["continuous"]["maxNumSeqs"] = 2  # another key: its own Job
    create(kube, precompile(namespace, "oom", other))  # the weights are there: no download
    oom(kube, namespace, compile_job(kube, walk, other, "oom"))
    walk.settles("oom", "Failed")
    walk.check({"Downloading", "Compiling", "Ready", "Invalid", "Failed"})
