"""`spyre-operator dev`: the operator on a local control plane, end to end, in one command.

Brings up (or reuses) a control plane, installs the CRD, runs `spyre-operator run` as a
subprocess, applies an example and prints `kubectl get spyremodels` whenever it changes.
The control plane has no kubelet, so without --simulate the model stops at its first Job
(the weights Job of a hub model, else the compile Job: it exists, its pod never runs); with
--simulate this command plays the kubelet.
With --node the demo runs for real on the local node (spyre_devcluster/node_demo.py), or says why
this machine cannot run one and plays the simulated demo instead.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from spyre_devcluster import node_demo, preflight, simulate
from spyre_devcluster.binaries import cache_root
from spyre_devcluster.controlplane import ControlPlane, ControlPlaneError
from spyre_devcluster.kubectl import Kubectl, KubectlError
from spyre_devcluster.node_demo import say
from spyre_devcluster.operator_process import OperatorExited, OperatorProcess
from spyre_devcluster.tools import ToolMissing, tool
from spyre_operator.api.names import CACHE_CRD_NAME, CRD_NAME
from spyre_operator.cli.render import crd_yaml
from spyre_operator.kube.client import Kube, load_api_client
from spyre_operator.render import meta
from spyre_operator.render.weights_job import is_commit

DEFAULT_EXAMPLE = "micro-granite-cpu.yaml"
FIRST_PHASES = ("Downloading", "Compiling")  # a hub model's weights Job, or the compile Job
POLL = 0.5
NODE_TIMEOUT = 1800.0  # a real compile and serving start on a loaded 2-core machine


class DevError(RuntimeError):
    pass


def _example(path: Path | None) -> Path:
    if path is not None:
        return path
    for root in (Path.cwd(), Path(__file__).resolve().parents[3]):
        candidate = root / "examples" / DEFAULT_EXAMPLE
        if candidate.exists():
            return candidate
    raise DevError(f"cannot find examples/{DEFAULT_EXAMPLE}; pass --example FILE")


def _kubectl_binary() -> str:
    try:
        return tool("kubectl")
    except ToolMissing:
        found = shutil.which("kubectl")
        if found is None:
            raise
        return found


class Session:
    """The control plane, the operator subprocess and a kubectl bound to them."""

    def __init__(self, directory: Path) -> None:
        self.plane = ControlPlane(directory)
        self.started_plane = False
        self.operator: OperatorProcess | None = None
        self.kubectl = Kubectl(self.plane.kubeconfig, namespace=None, binary=_kubectl_binary())
        self.operator_log = self.plane.dir / "operator.log"

    def up(self) -> Kube:
        if self.plane.running() is not None:
            say(f"reusing the control plane in {self.plane.dir}")
        else:
            say(f"starting a local control plane in {self.plane.dir} (etcd + kube-apiserver)")
            self.plane.up()
            self.started_plane = True
        return Kube(load_api_client(str(self.plane.kubeconfig)))

    def start_operator(self, namespace: str) -> None:
        say(
            f"starting the operator: spyre-operator run --namespace {namespace} "
            f"(log: {self.operator_log})"
        )
        self.operator = OperatorProcess(
            ["run", "--namespace", namespace], self.plane.kubeconfig, self.operator_log
        )

    def stop(self, keep: bool) -> None:
        if self.operator is not None and self.operator.stop(timeout=20):
            say("stopped the operator")
        if keep or not self.started_plane:
            say(f"control plane left running; kubeconfig: {self.plane.kubeconfig}")
            say(f"  kubectl --kubeconfig {self.plane.kubeconfig} get spyremodels -A")
            say(f"  stop it: spyre-operator cluster down --dir {self.plane.dir}")
        else:
            self.plane.down()
            say("stopped the control plane")

    def check_operator(self) -> None:
        if self.operator is not None:
            try:
                self.operator.check_alive()
            except OperatorExited as exc:
                raise DevError(str(exc)) from exc


def main(args: argparse.Namespace) -> int:
    if args.node:
        found = preflight.problems()
        if not found:
            directory = args.dir or cache_root() / "dev-node"
            return node_demo.main(directory, args.keep, max(args.timeout, NODE_TIMEOUT))
        say(f"{preflight.report(found)}\n  so: the simulated demo on a control plane instead")
        args.simulate = True
    directory = args.dir or cache_root() / "dev"
    try:
        example = _example(args.example)
        doc: dict[str, Any] = yaml.safe_load(example.read_text())
        session = Session(directory)
    except (DevError, ToolMissing, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    try:
        run(session, doc, example, args)
    except KeyboardInterrupt:
        say("interrupted")
    except (DevError, ControlPlaneError, KubectlError) as err:
        print(f"error: {err}", file=sys.stderr)
        session.stop(args.keep)
        return 1
    session.stop(args.keep)
    return 0


def run(session: Session, doc: dict[str, Any], example: Path, args: argparse.Namespace) -> None:
    kube = session.up()
    name = doc["metadata"]["name"]
    namespace = doc["metadata"].get("namespace") or "default"
    say("installing the SpyreModel and SpyreCache CRDs")
    session.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crd_yaml())
    for crd in (CRD_NAME, CACHE_CRD_NAME):
        session.kubectl("wait", "--for", "condition=established", f"crd/{crd}")
    session.start_operator(namespace)
    say(f"applying {example}")
    session.kubectl("apply", "-n", namespace, "-f", str(example))
    watch = Watch(session, namespace, name, args.timeout)
    watch.until("the first Job is created", lambda s: s.get("phase") in FIRST_PHASES)
    weights = watch.status.get("weights")
    first = weights["jobName"] if weights else meta.compile_job_name(watch.status["targetCacheKey"])
    say(
        f"{'weights' if weights else 'compile'} Job {first} exists: "
        + session.kubectl("get", "job", first, "-n", namespace, "--no-headers").strip()
    )
    say(
        "NOTE: this local control plane has no kubelet and no Job/Deployment controllers: "
        f"pods never run, so the model stays {watch.status['phase']} here."
    )
    if not args.simulate:
        say("re-run with --simulate to play the kubelet's part and see it become Ready")
        return
    if weights:
        revision = weights["revision"]
        commit = revision if is_commit(revision) else hashlib.sha1(revision.encode()).hexdigest()
        say(f"simulating: the weights pod of {first} resolves {revision} to {commit[:12]}")
        simulate.complete_weights_job(kube, namespace, first, commit)
        watch.until("the compile Job is created", lambda s: s.get("phase") == "Compiling")
    job = meta.compile_job_name(watch.status["targetCacheKey"])
    say(f"simulating: the compile pod of {job} terminates with its summary, Job complete")
    simulate.complete_job(kube, namespace, job)
    watch.until("the serving Deployment exists", lambda s: s.get("phase") == "Starting")
    say(f"simulating: Deployment {name} has all replicas ready")
    simulate.make_deployment_available(kube, namespace, name)
    watch.until("the model is Ready", lambda s: s.get("phase") == "Ready")
    say(f"Ready. endpoint: {watch.status.get('endpoint')}")


class Watch:
    """Polls one SpyreModel, printing the `kubectl get` line whenever it changes."""

    def __init__(self, session: Session, namespace: str, name: str, timeout: float) -> None:
        self.session, self.namespace, self.name, self.timeout = session, namespace, name, timeout
        self.status: dict[str, Any] = {}
        self._last = ""
        self._header = False

    def poll(self) -> None:
        self.session.check_operator()
        # The status first: the printed line is then at least as new as what is checked.
        got = self.session.kubectl(
            "get", "spyremodels", self.name, "-n", self.namespace, "-o", "yaml"
        )
        self.status = (yaml.safe_load(got) or {}).get("status") or {}
        table = self.session.kubectl("get", "spyremodels", self.name, "-n", self.namespace)
        header, _, line = table.strip().partition("\n")
        if not self._header:
            print(f"           {header}", flush=True)
            self._header = True
        if line != self._last:
            say(line)
            self._last = line

    def until(self, what: str, done: Callable[[dict[str, Any]], bool]) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            self.poll()
            if done(self.status):
                return
            time.sleep(POLL)
        raise DevError(
            f"timed out after {self.timeout:.0f}s waiting until {what}; status: {self.status}"
        )
