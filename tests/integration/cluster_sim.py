"""Helpers of the operator integration tests: the CRD, the operator as a real subprocess
(`spyre-operator run`), polling, and SpyreModel bodies. The cluster's part (kubelet, Job
and Deployment controllers) is played by spyre_devcluster.simulate, the same
module `spyre-operator dev --simulate` uses."""

from __future__ import annotations

import copy
import itertools
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import chart_identity
import yaml

from spyre_devcluster import simulate
from spyre_devcluster.controlplane import free_port
from spyre_devcluster.operator_process import OperatorProcess
from spyre_operator.api.validation import parse
from spyre_operator.controller import metrics_server
from spyre_operator.kube.client import ApiError, Kube, load_api_client
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.weights_job import weights_job_name

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 90.0  # seconds; generous: a loaded 2-core machine runs apiserver, etcd and us
T = TypeVar("T")


def kube_for(kubeconfig: Path) -> Kube:
    return Kube(load_api_client(str(kubeconfig)))


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = TIMEOUT) -> T:
    return simulate.poll_until(probe, what, timeout)


def example(stem: str = "micro-granite-cpu", **spec: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / f"{stem}.yaml").read_text())
    doc["spec"] |= spec
    return doc


def model(namespace: str, name: str, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    out = copy.deepcopy(doc or example())
    out["metadata"] = {"name": name, "namespace": namespace}
    return out


def job_name(doc: dict[str, Any]) -> str:
    """The compile Job (of a hub model pinned to a commit, or resolved to its revision)."""
    return meta.compile_job_name(cache_key(parse(doc).spec))


def entry_name(doc: dict[str, Any]) -> str:
    """The inventory entry (a SpyreCache) of a SpyreModel's key, one more owner of its
    compile Job."""
    return meta.inventory_name(cache_key(parse(doc).spec))


def job_owners(kube: Kube, namespace: str, job: str) -> set[str]:
    """Names of the SpyreModels and SpyreCaches owning a (shared) Job."""
    found = kube.get("Job", namespace, job) or {"metadata": {}}
    return {o["name"] for o in found["metadata"].get("ownerReferences") or []}


def download(kube: Kube, doc: dict[str, Any], commit: str | None = None) -> str:
    """Play a hub model's weights Job: it exists, then its revision resolves to `commit`
    (default: the revision, a pinned commit in the examples). Returns the commit."""
    namespace, spec = doc["metadata"]["namespace"], parse(doc).spec
    name = weights_job_name(spec)
    wait_for(lambda: kube.get("Job", namespace, name), f"the weights Job {name} exists")
    commit = commit or spec.model.revision
    assert commit is not None
    simulate.complete_weights_job(kube, namespace, name, commit)
    return commit


def compile_job(kube: Kube, doc: dict[str, Any]) -> str:
    """Play a hub model's download, then wait for its compile Job: the Job's name."""
    namespace, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
    download(kube, doc)
    wait_phase(kube, namespace, name, "Compiling")
    job = job_name(doc)
    wait_for(lambda: kube.get("Job", namespace, job), f"Job {job}")
    return job


def create(kube: Kube, obj: dict[str, Any]) -> dict[str, Any]:
    return kube.create(obj)


def get(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    found = kube.get("SpyreModel", namespace, name)
    assert found is not None, f"SpyreModel {namespace}/{name} is gone"
    return found


def status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return get(kube, namespace, name).get("status") or {}


def condition(st: dict[str, Any], kind: str) -> tuple[str, str, str]:
    for cond in st.get("conditions") or []:
        if cond["type"] == kind:
            return cond["status"], cond["reason"], cond.get("message", "")
    return "", "", ""


def wait_phase(kube: Kube, namespace: str, name: str, phase: str, **extra: Any) -> dict[str, Any]:
    """The status once it has the phase (and the extra fields), for the current generation."""

    seen: list[dict[str, Any]] = [{}]

    def probe() -> dict[str, Any] | None:
        obj = get(kube, namespace, name)
        st = seen[0] = obj.get("status") or {}
        fresh = st.get("observedGeneration") == obj["metadata"]["generation"]
        matches = all(st.get(k) == v for k, v in extra.items())
        return st if fresh and st.get("phase") == phase and matches else None

    try:
        return wait_for(probe, f"{namespace}/{name} is {phase} with {extra}")
    except simulate.Timeout as timeout:
        raise simulate.Timeout(f"{timeout}; the status last seen: {seen[0]}") from None


def spec_patch(kube: Kube, namespace: str, name: str, spec: dict[str, Any]) -> None:
    kube.patch("SpyreModel", namespace, name, {"spec": spec})


def gone(kube: Kube, kind: str, namespace: str, name: str) -> bool:
    return kube.get(kind, namespace, name) is None


class Operator(OperatorProcess):
    """`spyre-operator run --namespace NS`, waited for until it serves its metrics; as the
    chart's ServiceAccount under the chart's roles in the namespaces it watches (the
    admin `kubeconfig` installs them)."""

    def __init__(
        self, kubeconfig: Path, namespace: str, log: Path, resync: float, *flags: str
    ) -> None:
        self.port = free_port()
        args = ["run", "--namespace", namespace, "--metrics-port", str(self.port),
                "--resync-seconds", str(resync), *flags]  # fmt: skip
        watched = [namespace] + [v for f, v in itertools.pairwise(flags) if f == "--namespace"]
        identity = chart_identity.operator_kubeconfig(
            kube_for(kubeconfig), kubeconfig, watched, log.with_suffix(".kubeconfig")
        )
        super().__init__(args, identity, log)
        wait_for(self._metrics_or_none, "the operator serves its metrics")

    def _metrics_or_none(self) -> dict[str, float] | None:
        self.check_alive()
        try:
            return self.metrics()
        except OSError:
            return None

    def metrics(self) -> dict[str, float]:
        return metrics_server.parse(self.metrics_text())

    def metrics_text(self) -> str:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text: str = response.read().decode()
            return text


@contextmanager
def running_operator(
    kubeconfig: Path, namespace: str, log: Path, resync: float = 300.0, *flags: str
) -> Iterator[Operator]:
    """The operator for one test namespace (more `flags` of `spyre-operator run`); its log
    is printed when the test fails."""
    kube = kube_for(kubeconfig)
    simulate.install_crds(kube)
    operator = Operator(kubeconfig, namespace, log, resync, *flags)
    try:
        yield operator
    except BaseException:
        print(f"--- operator log ({log}) ---\n{operator.output(80)}")
        raise
    finally:
        operator.stop()


def ignore_missing(fn: Callable[[], object]) -> None:
    try:
        fn()
    except ApiError as err:
        if not err.not_found:
            raise


def to_ready(kube: Kube, doc: dict[str, Any]) -> dict[str, Any]:
    """Create a SpyreModel and play the cluster until it is Ready; its status."""
    namespace, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
    create(kube, doc)
    download(kube, doc)
    wait_phase(kube, namespace, name, "Compiling")
    job = job_name(doc)
    wait_for(lambda: kube.get("Job", namespace, job), f"Job {job} exists")
    simulate.complete_job(kube, namespace, job)
    wait_for(lambda: kube.get("Deployment", namespace, name), f"Deployment {name} exists")
    simulate.make_deployment_available(kube, namespace, name)
    return wait_phase(kube, namespace, name, "Ready")


def deployment_key(kube: Kube, namespace: str, name: str) -> str | None:
    deploy = kube.get("Deployment", namespace, name)
    if deploy is None:
        return None
    key: str | None = deploy["metadata"].get("annotations", {}).get(meta.CACHE_KEY_ANNOTATION)
    return key


def events_for(kube: Kube, namespace: str, name: str) -> list[tuple[str, str]]:
    """(type, reason) of the Events about one object, oldest first."""
    items = kube.request("GET", f"/api/v1/namespaces/{namespace}/events").get("items", [])
    mine = [e for e in items if e["involvedObject"].get("name") == name]
    # Timestamps have whole seconds: ties go by resourceVersion (the order of creation).
    mine.sort(key=lambda e: (e.get("firstTimestamp") or "", int(e["metadata"]["resourceVersion"])))
    return [(e["type"], e["reason"]) for e in mine]
