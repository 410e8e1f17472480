"""What one SpyreModel create costs the API server (not a test; issue 31), before and after
the pruning CRD schema, in the same run.

    .venv/bin/python benchmarks/crd_cost.py [--depth 16] [--repeat 10] [--no-before]

Starts its own control plane (etcd and kube-apiserver, no controllers, no operator) and
installs the SpyreModel CRD twice: first as it was before (every object of the spec but
affinity kept unknown fields, `x-kubernetes-preserve-unknown-fields`; skipped with
--no-before), then as generated now (pruned everywhere). For each it creates, back to back
(at least --repeat, and enough for about 3 s), a plain SpyreModel and hostile ones a user
allowed to create SpyreModels in one namespace could post: maps nested --depth levels
under spec.resources, a toleration and spec.rollout (kept before, pruned after), the same
nested 200 levels (after only: before, the cost grows exponentially with the depth),
60,000 unknown keys in the spec (~1 MB), a ~1 MB spec of fields at their size bounds (env
values of 32 KiB, spec.rollout and cache.compile.minServingReplicas at theirs), the affinity
with every list at its bound, the spec with every list of objects at its bound (the most
fields the schema checks that `validate` takes: the costliest per byte), and that affinity
with unknown keys up to the request limit (3 MiB). It prints the API server's CPU seconds
per create (utime + stime of the kube-apiserver process, from /proc, over the creates and
until it is idle again, less its idle rate measured just before) and the median wall time
of the POST, each beside the plain create's.

A create's cost grows with its size whatever the schema (the body is read and decoded
before anything else; the request limit is 3 MiB), so each is also measured against
yardsticks of its size: `x flat` beside a custom resource with a flat, minimal schema (a
`Flat`, its spec one string) of the same size in bytes (what any custom resource that
large costs, read, decoded and stored), `x same` beside the same spec posted as a Flat
(decoded, then pruned to nothing: what the body's shape costs to read, before any schema
of ours), `x cm` beside a ConfigMap of the same size (a core kind).

Then, with the pruning schema: each field of the largest spec alone (which bounds the
cost comes from), and the affinity from one term of one requirement of one value to
twice the bounds before, in a `Placement` (a custom resource whose schema is the
SpyreModel's affinity without its list bounds), each beside a Flat of its size and a
Deployment whose pods carry the same affinity (`x dep`: Kubernetes' own handling of
these fields, which bounds none of the lists), with the CPU per field beyond the Flat's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from crd_specs import (
    FLAT_API,
    FLAT_CRD,
    GROWTH,
    LARGEST,
    PLAIN,
    STORED_MOST,
    affinity,
    cases,
    config_map,
    deployment,
    document,
    fields,
    flat,
    kept_unknown,
    largest_spec,
    placement,
    placement_crd,
    same_as_flat,
)

from spyre_devcluster.controlplane import ControlPlane
from spyre_devcluster.simulate import poll_until
from spyre_operator.api.crd import build_crd
from spyre_operator.api.names import API_VERSION, PLURAL
from spyre_operator.kube.client import ApiError, Kube, load_api_client

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def install(kube: Kube, crd: dict[str, Any]) -> None:
    url = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
    kube.request(
        "PATCH",
        url,
        crd,
        content_type="application/apply-patch+yaml",
        query={"fieldManager": "crd-cost", "force": "true"},
    )


def serves(kube: Kube, namespace: str, keeps_unknown: bool) -> None:
    """Wait until the API server decodes SpyreModels with this schema (it reloads a
    changed CRD asynchronously): an unknown field is kept, or pruned."""

    def probe() -> bool:
        body = document("probe", PLAIN | {"probeField": 1})
        try:
            stored = kube.request(
                "POST",
                f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}",
                body,
                query={"dryRun": "All"},
            )
        except ApiError:
            return False
        return ("probeField" in stored["spec"]) == keeps_unknown

    poll_until(probe, "the API server serves the installed SpyreModel schema", 120)


def accepts(kube: Kube, namespace: str, body: dict[str, Any]) -> None:
    """Wait until the API server serves the kind of `body` (a CRD just installed)."""

    def probe() -> bool:
        try:
            kube.request("POST", collection(body, namespace), body, query={"dryRun": "All"})
        except ApiError:
            return False
        return True

    poll_until(probe, f"the API server serves {body['kind']}", 120)


def collection(body: dict[str, Any], namespace: str) -> str:
    if body["kind"] == "ConfigMap":
        return f"/api/v1/namespaces/{namespace}/configmaps"
    if body["kind"] == "Deployment":
        return f"/apis/apps/v1/namespaces/{namespace}/deployments"
    if body["kind"] in ("Flat", "Placement"):
        return f"/apis/{FLAT_API}/namespaces/{namespace}/{body['kind'].lower()}s"
    return f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}"


def settle(pid: int, limit: float = 300) -> None:
    """Until the API server's CPU is idle, two half seconds in a row of at most 2 ticks
    (a create the client gave up on runs on; a CRD just installed is compiled into its
    OpenAPI for seconds, which would count as idle below)."""
    deadline, quiet = time.monotonic() + limit, 0
    while time.monotonic() < deadline and quiet < 2:
        before = cpu_seconds(pid)
        time.sleep(0.5)  # sampling the server's CPU, not asserting on it
        quiet = quiet + 1 if cpu_seconds(pid) - before <= 2 / TICKS else 0


def idle_rate(pid: int, seconds: float = 3.0) -> float:
    """The API server's CPU seconds per second with no request (its own timers)."""
    cpu, started = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)  # sampling the server's CPU, not asserting on it
    return (cpu_seconds(pid) - cpu) / (time.monotonic() - started)


def batch(
    kube: Kube, pid: int, namespace: str, bodies: list[dict[str, Any]]
) -> tuple[float, float]:
    """The API server's CPU per create (the creates back to back, then until it is idle
    again, less its idle rate over that time), and the median wall time of a POST."""
    settle(pid)
    idle = idle_rate(pid)
    cpu, started = cpu_seconds(pid), time.monotonic()
    walls = []
    for body in bodies:
        posted = time.monotonic()
        try:
            kube.request("POST", collection(body, namespace), body)
        except ApiError as err:  # a timeout: the server goes on; the CPU it spends counts
            # (a ConfigMap over its 1 MiB is decoded, then refused: what it measures)
            if not (body["kind"] == "ConfigMap" and err.status == 422):
                print(f"    {body['metadata']['name']}: {str(err)[:120]}", file=sys.stderr)
        walls.append(time.monotonic() - posted)
    settle(pid)
    spent = cpu_seconds(pid) - cpu - idle * (time.monotonic() - started)
    return max(spent, 0.0) / len(bodies), statistics.median(walls)


def creates(kube: Kube, namespace: str, first: dict[str, Any], repeat: int) -> int:
    """How many creates to time: at least `repeat`, and enough for about 3 s (the CPU
    counters tick every 10 ms), at most 1,000 and 30 MB."""
    started = time.monotonic()
    kube.request("POST", collection(first, namespace), first)
    wall = max(time.monotonic() - started, 0.001)
    most = max(repeat, min(1000, 30_000_000 // len(json.dumps(first))))
    return max(repeat, min(most, round(3.0 / wall)))


def run(
    kube: Kube, pid: int, label: str, keeps_unknown: bool, depth: int, repeat: int
) -> dict[str, tuple[float, float, float, float]]:
    """case -> (the API server's CPU per create, that of a Flat of the same size, that of
    the same spec posted as a Flat, that of a ConfigMap of the same size)."""
    namespace = f"cost-{'kept' if keeps_unknown else 'pruned'}"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    serves(kube, namespace, keeps_unknown)
    print(f"\n{label}")
    print(
        f"  {'create':36} {'bytes':>9} {'CPU s':>8} {'x plain':>8} {'x flat':>6} "
        f"{'x same':>6} {'x cm':>6} {'wall s':>8} {'x plain':>8}"
    )
    plain_cpu = plain_wall = 0.0
    costs: dict[str, tuple[float, float, float, float]] = {}
    for i, (case, (spec, not_kept)) in enumerate(cases(depth).items()):
        if keeps_unknown and not_kept:
            print(f"  {case:36} not posted: {not_kept}")
            continue
        first = document(f"c{i}-first", spec())
        size = len(json.dumps(first))
        count = creates(kube, namespace, first, repeat)
        bodies = [document(f"c{i}-{n}", spec()) for n in range(count)]
        cpu, wall = batch(kube, pid, namespace, bodies)
        same_size = math.nan  # a Flat that large is refused: it would not be stored
        if size <= STORED_MOST:
            flats = [flat(f"c{i}-size-{n}", size) for n in range(count)]
            same_size = max(batch(kube, pid, namespace, flats)[0], 0.001)
        same_spec = max(batch(kube, pid, namespace, [same_as_flat(b) for b in bodies])[0], 0.001)
        maps = [config_map(f"c{i}-cm-{n}", size) for n in range(count)]
        same_cm = max(batch(kube, pid, namespace, maps)[0], 0.001)
        if case == "plain":
            plain_cpu, plain_wall = max(cpu, 0.001), wall
        costs[case] = (cpu, same_size, same_spec, same_cm)
        beside_flat = "-" if math.isnan(same_size) else f"{cpu / same_size:.1f}"
        print(
            f"  {case:36} {size:>9} {cpu:>8.4f} {cpu / plain_cpu:>8.1f} "
            f"{beside_flat:>6} {cpu / same_spec:>6.1f} {cpu / same_cm:>6.1f} {wall:>8.3f} "
            f"{wall / plain_wall:>8.1f}"
        )
    return costs


def growth(kube: Kube, pid: int, repeat: int, plain_cpu: float) -> None:
    """The affinity at a few sizes, in a Placement, each beside a Flat of its bytes and a
    Deployment whose pods carry the same affinity (Kubernetes' own validation of these
    fields, which bounds none of its lists), and the CPU per field beyond the Flat's."""
    namespace = "cost-growth"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    install(kube, placement_crd())
    accepts(kube, namespace, placement("probe", affinity(1, 1, 1)))
    print("\nthe affinity's size (terms x requirements x values) against its cost")
    print(
        f"  {'affinity':10} {'fields':>7} {'bytes':>8} {'CPU s':>8} {'x plain':>8} "
        f"{'x flat':>6} {'x dep':>6} {'us/field':>8}"
    )
    for i, (terms, requirements, values) in enumerate(GROWTH):
        placed = affinity(terms, requirements, values)
        first = placement(f"g{i}-first", placed)
        size = len(json.dumps(first))
        count = creates(kube, namespace, first, repeat)
        bodies = [placement(f"g{i}-{n}", placed) for n in range(count)]
        cpu = batch(kube, pid, namespace, bodies)[0]
        flats = [flat(f"g{i}-size-{n}", size) for n in range(count)]
        same_size = max(batch(kube, pid, namespace, flats)[0], 0.001)
        deps = [deployment(f"g{i}-{n}", placed) for n in range(count)]
        dep = max(batch(kube, pid, namespace, deps)[0], 0.001)
        checked = fields(placed)
        per_field = (cpu - same_size) / checked * 1e6
        print(
            f"  {f'{terms}x{requirements}x{values}':10} {checked:>7} {size:>8} {cpu:>8.4f} "
            f"{cpu / plain_cpu:>8.1f} {cpu / same_size:>6.1f} {cpu / dep:>6.1f} "
            f"{per_field:>8.1f}"
        )


def parts(kube: Kube, pid: int, repeat: int, plain_cpu: float) -> None:
    """Each field of the largest spec alone (beside a plain spec), and its CPU per field
    beyond a Flat of its bytes: which bounds the cost comes from."""
    namespace = "cost-pruned"
    print("\nthe largest spec's fields, one at a time")
    print(
        f"  {'field':26} {'fields':>7} {'bytes':>8} {'CPU s':>8} {'x plain':>8} "
        f"{'x flat':>6} {'us/field':>8}"
    )
    largest = largest_spec()
    for i, name in enumerate(k for k in largest if k not in PLAIN):
        spec = PLAIN | {name: largest[name]}
        first = document(f"p{i}-first", spec)
        size = len(json.dumps(first))
        count = creates(kube, namespace, first, repeat)
        cpu = batch(kube, pid, namespace, [document(f"p{i}-{n}", spec) for n in range(count)])[0]
        flats = [flat(f"p{i}-size-{n}", size) for n in range(count)]
        same_size = max(batch(kube, pid, namespace, flats)[0], 0.001)
        checked = fields(largest[name])
        per_field = (cpu - same_size) / checked * 1e6
        print(
            f"  {name:26} {checked:>7} {size:>8} {cpu:>8.4f} {cpu / plain_cpu:>8.1f} "
            f"{cpu / same_size:>6.1f} {per_field:>8.1f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--depth", type=int, default=16, help="nesting of the maps (default 16)")
    parser.add_argument("--repeat", type=int, default=10, help="creates of each (default 10)")
    parser.add_argument(
        "--no-before",
        action="store_true",
        help="skip the CRD as it was (its nested creates take seconds each)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="crd-cost-") as tmp:
        plane = ControlPlane(Path(tmp))
        state = plane.up(controller_manager=False)
        try:
            (apiserver,) = [p.pid for p in state.processes if p.name == "kube-apiserver"]
            kube = Kube(load_api_client(str(plane.kubeconfig)))
            print(f"kube-apiserver pid {apiserver}; at least {args.repeat} creates of each")
            new = build_crd()
            install(kube, FLAT_CRD)
            if not args.no_before:
                install(kube, kept_unknown(new))
                run(
                    kube,
                    apiserver,
                    "before: the spec's objects keep unknown fields",
                    True,
                    args.depth,
                    args.repeat,
                )
            install(kube, new)
            after = run(
                kube, apiserver, "after: the pruning schema", False, args.depth, args.repeat
            )
            plain = max(after["plain"][0], 0.001)
            parts(kube, apiserver, args.repeat, plain)
            growth(kube, apiserver, args.repeat, plain)
            deep = max((c for c in after if "deep" in c), key=lambda c: after[c][0])
            big = [c for c in after if c != "plain" and "deep" not in c]  # the oversized
            stored = [c for c in big if not math.isnan(after[c][1])]
            flat_worst = max(stored, key=lambda c: after[c][0] / after[c][1])
            same_worst = max(big, key=lambda c: after[c][0] / after[c][2])
            limit = max(after, key=lambda c: after[c][0])
            print(
                f"\nwith the pruning schema, the worst nested create ({deep}) took "
                f"{after[deep][0] / plain:.1f}x the API server's CPU of a plain create; "
                f"the worst oversized one ({flat_worst}) "
                f"{after[flat_worst][0] / after[flat_worst][1]:.1f}x a Flat of its size, "
                f"and ({same_worst}) {after[same_worst][0] / after[same_worst][2]:.1f}x "
                f"its spec posted as a Flat; the costliest ({limit}) "
                f"{after[limit][0]:.3f} s, {after[limit][0] / after[limit][2]:.1f}x its spec "
                "posted as a Flat; the largest valid spec "
                f"{after[LARGEST][0] / plain:.1f}x a plain create (docs/api.md: 2x is out of "
                "reach for it)"
            )
        finally:
            plane.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
