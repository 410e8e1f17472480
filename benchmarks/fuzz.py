"""Fuzz benchmark (not a test): hostile SpyreModels through `validate`, and optionally
through the API server with the operator running.

    .venv/bin/python benchmarks/fuzz.py [--n 1000] [--seed 1] [--timeout 10]
    .venv/bin/python benchmarks/fuzz.py --server [--n 50] [--wait 60]

Each mutant is one of the examples (examples/*.yaml) changed by one mutation kind:
wrong types, huge sizes, unicode, deep nesting, YAML aliases and duplicate keys, odd
numbers, unknown or deleted fields, broken YAML, and values Kubernetes refuses in the
pass-through fields (tolerations, nodeSelector, resources, affinity, image, claim names,
storage class, size, scheduler name) and in the rollout (spec.rollout,
cache.compile.minServingReplicas).

Offline, every mutant is written to a file and checked by what `spyre-operator validate`
runs (cli.render.load), in a worker process with a time limit per file. Prints:
- crashes: an exception escaped (validate would print a traceback);
- hangs: no answer within --timeout seconds;
- the slowest validation, and the time to validate a 1 MB file (under 1 s is the goal).

With --server: starts a local control plane (etcd + kube-apiserver) and
`spyre-operator run`, creates every mutant the API server can take as JSON (name m<i>, a
namespace of its own), waits up to --wait seconds, and prints:
- creates the API server did not answer within 30 s (it keeps working on them);
- without status: admitted objects the operator never wrote a status for;
- accepted but refused: objects the operator took as valid (phase not Invalid) whose
  children the API server refuses: a server dry-run of each child `render` makes (and of a
  Pod from each pod template, where Kubernetes checks more), or status reason ApplyFailed
  (a write refused) or Refused (the operator's own dry run refused a child).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml
from fuzz_mutants import MB, ROOT, mutants, one_megabyte_files

sys.path.insert(0, str(ROOT / "tests" / "integration"))  # cluster_sim, for --server

# --- validate, in a worker process with a time limit ---------------------------------


def _serve(conn: Connection) -> None:
    from spyre_operator.cli.render import load

    while True:
        path = conn.recv()
        started = time.perf_counter()
        try:
            loaded = load([path], "default")
            result: tuple[str, Any] = ("ok", len(loaded.errors))
        except BaseException as err:  # a crash: what validate would print as a traceback
            result = ("crash", f"{type(err).__name__}: {str(err)[:200]}")
        conn.send((*result, time.perf_counter() - started))


class Validator:
    """validate in a child process: one that does not answer in `timeout` s is killed."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._start()

    def _start(self) -> None:
        self.conn, child = multiprocessing.Pipe()
        self.proc = multiprocessing.get_context("fork").Process(target=_serve, args=(child,))
        self.proc.start()

    def check(self, path: Path) -> tuple[str, Any, float]:
        self.conn.send(str(path))
        if self.conn.poll(self.timeout):
            outcome: tuple[str, Any, float] = self.conn.recv()
            return outcome
        self.proc.kill()
        self.proc.join()
        self._start()
        return "hang", f"no answer in {self.timeout:g} s", self.timeout

    def close(self) -> None:
        self.proc.kill()
        self.proc.join()


def offline(cases: list[tuple[str, str]], timeout: float, directory: Path) -> int:
    validator = Validator(timeout)
    outcomes: Counter[str] = Counter()
    slowest: tuple[float, str] = (0.0, "")
    bad: list[str] = []
    try:
        for i, (kind, text) in enumerate(cases):
            path = directory / f"m{i}.yaml"
            path.write_text(text, errors="surrogatepass")
            outcome, detail, seconds = validator.check(path)
            outcomes[outcome] += 1
            if outcome == "ok":
                outcomes["refused" if detail else "accepted"] += 1
            else:
                bad.append(f"  {outcome}: mutant {i} ({kind}), {path.name}: {detail}")
            slowest = max(slowest, (seconds, f"mutant {i} ({kind})"))
        big = {}
        for name, text in one_megabyte_files().items():
            path = directory / f"1mb-{name}.yaml"
            path.write_text(text)
            outcome, detail, big[name] = validator.check(path)
            if outcome != "ok":
                bad.append(f"  {outcome}: the 1 MB file of {name}: {detail}")
                outcomes[outcome] += 1
    finally:
        validator.close()
    print(f"validate: {len(cases)} mutants (seed and kinds above)")
    print(f"  accepted {outcomes['accepted']}, refused with problems {outcomes['refused']}")
    print(f"  crashes {outcomes['crash']}")
    print(f"  hangs (> {timeout:g} s) {outcomes['hang']}")
    print(f"  slowest validation {slowest[0] * 1000:.0f} ms ({slowest[1]})")
    for name, seconds in big.items():
        print(f"  1 MB file ({name}): {seconds * 1000:.0f} ms")
    print("\n".join(bad[:20]))
    return outcomes["crash"] + outcomes["hang"]


# --- through the API server, with the operator running ------------------------------


def _json_or_none(text: str) -> dict[str, Any] | None:
    """The mutant as the API server can get it: one mapping that is JSON (no NaN, no
    non-string keys, no alias bomb), else None."""
    from spyre_operator.render.yamlio import load_documents

    try:
        docs = load_documents(text)
        if len(docs) != 1 or not isinstance(docs[0], dict):
            return None
        body = json.dumps(docs[0], allow_nan=False)
    except (yaml.YAMLError, ValueError, TypeError, RecursionError):
        return None
    if len(body) > 3 * MB:
        return None
    parsed: dict[str, Any] = json.loads(body)
    return parsed


def server(cases: list[tuple[str, str]], wait_seconds: float, directory: Path) -> int:
    from cluster_sim import kube_for
    from urllib3.exceptions import ReadTimeoutError

    from spyre_devcluster import simulate
    from spyre_devcluster.controlplane import ControlPlane, free_port
    from spyre_devcluster.operator_process import OperatorProcess
    from spyre_operator.api.validation import InvalidSpec, parse
    from spyre_operator.kube.client import ApiError, path
    from spyre_operator.render.children import desired

    plane = ControlPlane(directory / "plane")
    plane.up()
    operator = None
    try:
        kube = kube_for(plane.kubeconfig)
        simulate.install_crds(kube)
        args = ["run", "--metrics-port", str(free_port())]
        operator = OperatorProcess(args, plane.kubeconfig, directory / "operator.log")
        answers: Counter[str] = Counter()
        slow: list[str] = []
        admitted: dict[str, str] = {}  # namespace -> kind
        for i, (kind, text) in enumerate(cases):
            body = _json_or_none(text)
            if body is None:
                answers["not JSON (not sent)"] += 1
                continue
            namespace = f"fuzz-{i}"  # one each: the cache PVC is per namespace
            kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
            # what the controller manager's token controller would make (it runs none)
            account = {"metadata": {"name": "default"}}
            kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
            body["metadata"] = {"name": f"m{i}", "namespace": namespace}
            try:
                kube.request("POST", path("SpyreModel", namespace), body)
            except ApiError as err:
                answers[f"refused {err.status}"] += 1
                continue
            except ReadTimeoutError:  # the server is still at it (deep maps it keeps)
                answers["no answer in 30 s"] += 1
                slow.append(f"m{i} ({kind})")
                continue
            answers["admitted"] += 1
            admitted[namespace] = kind
        operator.check_alive()
        statuses = _statuses(kube, admitted, wait_seconds)
        no_status = [ns for ns in admitted if not statuses.get(ns)]
        refused: list[str] = []
        for namespace, st in statuses.items():
            if not st:
                continue
            if st.get("phase") == "Invalid":  # validate's refusal, or the server's (dry run)
                why = _refused_by_server(st)
                if why:
                    refused.append(f"{namespace} ({admitted[namespace]}): {why}"[:300])
                continue
            stored = kube.get("SpyreModel", namespace, namespace.replace("fuzz-", "m"))
            try:
                want = desired(parse(stored), stored["metadata"]["uid"], commit="0" * 40)
            except InvalidSpec as err:  # the operator said valid, the parse says not
                refused.append(f"{namespace}: operator valid, parse invalid: {err}"[:300])
                continue
            why = refusals(kube, want.objects()) or _refused_by_server(st)
            if why:
                refused.append(f"{namespace} ({admitted[namespace]}): {why}"[:300])
        operator.check_alive()
    finally:
        if operator is not None:
            operator.stop(timeout=30)
        plane.down()
    print(f"API server: {len(cases)} mutants: {dict(sorted(answers.items()))}")
    print(f"  create not answered in 30 s: {len(slow)} {slow[:10]}")
    print(f"  without status after {wait_seconds:g} s: {len(no_status)} {no_status[:10]}")
    print(f"  accepted but refused children: {len(refused)}")
    print("\n".join(f"    {line}" for line in refused[:20]))
    return len(slow) + len(no_status) + len(refused)


def _statuses(kube: Any, admitted: dict[str, str], wait_seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait_seconds
    found: dict[str, Any] = {}
    while True:
        for namespace in admitted:
            if not found.get(namespace):
                obj = kube.get("SpyreModel", namespace, namespace.replace("fuzz-", "m")) or {}
                found[namespace] = obj.get("status")
        if all(found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(1)  # polling a benchmark's progress, not asserting on it


def refusals(kube: Any, objects: list[dict[str, Any]]) -> str:
    """The first refusal of a server dry-run of the children, and of a Pod from each pod
    template (a Job or Deployment is admitted with an image a Pod is refused for), in the
    namespace's default ServiceAccount (whether a named one exists is not the spec's
    validity). Only 400 and 422 are refusals: 409 is an object the operator created."""
    from spyre_operator.kube.client import ApiError

    bodies = list(objects)
    for obj in objects:
        template = obj.get("spec", {}).get("template")
        if template:
            meta = obj["metadata"]
            spec = {**template["spec"], "serviceAccountName": "default"}
            bodies.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "spec": spec,
                    "metadata": {
                        "name": meta["name"][:50] + "-pod",
                        "namespace": meta["namespace"],
                    },
                }
            )
    for body in bodies:
        try:
            kube.dry_run(body)
        except ApiError as err:
            if err.status in (400, 422):
                said = str(err.body.get("message") or err)[:400]
                return f"{body['kind']} refused ({err.status}): {said}"
    return ""


def _refused_by_server(status: dict[str, Any]) -> str:
    """The operator wrote a child the API server refused (ApplyFailed), or its dry run
    found one (Refused): validate had accepted the document."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Degraded" and cond.get("reason") in ("ApplyFailed", "Refused"):
            return f"{cond['reason']}: {cond.get('message', '')[:200]}"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1000, help="mutants (default 1000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per file before a hang (10)"
    )
    parser.add_argument(
        "--server",
        action="store_true",
        help="also create the mutants on a local control plane with the operator running",
    )
    parser.add_argument(
        "--wait", type=float, default=60.0, help="--server: seconds to wait for status (60)"
    )
    args = parser.parse_args(argv)
    cases = mutants(args.n, args.seed)
    print(f"mutants: {args.n}, seed {args.seed}: {dict(Counter(k for k, _ in cases))}")
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        failures = offline(cases, args.timeout, Path(tmp))
        if args.server:
            failures += server(cases, args.wait, Path(tmp))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
