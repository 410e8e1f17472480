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
import copy
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spyre_devcluster.controlplane import ControlPlane
from spyre_devcluster.simulate import poll_until
from spyre_operator.api.crd import build_crd
from spyre_operator.api.names import API_VERSION, KIND, PLURAL
from spyre_operator.kube.client import ApiError, Kube, load_api_client

TICKS = os.sysconf("SC_CLK_TCK")
# The yardstick's kind: a custom resource whose schema is one string.
FLAT_GROUP = "crd-cost.example.com"
FLAT_API = f"{FLAT_GROUP}/v1"
FLAT_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"flats.{FLAT_GROUP}"},
    "spec": {
        "group": FLAT_GROUP,
        "names": {"kind": "Flat", "plural": "flats", "singular": "flat", "listKind": "FlatList"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
            "openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"data": {"type": "string"}}}}}}}],
    },
}  # fmt: skip
PLAIN: dict[str, Any] = {
    "model": {"id": "ibm-granite/granite-3.3-8b-instruct"},
    "batching": {"continuous": {"maxModelLen": 8192, "maxNumSeqs": 4}},
}


def nested(depth: int) -> dict[str, Any]:
    deep: dict[str, Any] = {"leaf": "x"}
    for i in range(depth):
        deep = {f"n{i % 3}": deep, "x": i}  # two keys a level, as a patient attacker writes
    return deep


def bound(path: str, key: str = "maxItems") -> int:
    """A size bound of the SpyreModel CRD's spec, by its dotted path ([] an item)."""
    node = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return int(node[key])


def affinity(terms: int, requirements: int, values: int) -> dict[str, Any]:
    """spec.affinity with every list of terms at `terms`, of requirements at `requirements`
    and of values at `values`, each value one character: the most fields the schema checks
    per byte (the node terms' matchFields left out: Kubernetes takes one metadata.name
    there)."""
    requirement = {"key": "k", "operator": "In", "values": ["v"] * values}
    node_terms = [{"matchExpressions": [requirement] * requirements}] * terms
    label_selector = {"matchExpressions": [requirement] * requirements}
    pod_term = {"topologyKey": "z", "labelSelector": label_selector,
                "namespaceSelector": label_selector}  # fmt: skip
    pods = {
        "requiredDuringSchedulingIgnoredDuringExecution": [pod_term] * terms,
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": pod_term}
        ]
        * terms,
    }
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": t} for t in node_terms
            ],
        },
        "podAffinity": pods,
        "podAntiAffinity": pods,
    }


def affinity_at_bounds() -> dict[str, Any]:
    """spec.affinity with every list at the CRD's maxItems."""
    node = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = f"{node}.nodeSelectorTerms"
    expressions = f"{terms}.[].matchExpressions"
    return affinity(bound(terms), bound(expressions), bound(f"{expressions}.[].values"))


def selector_at_bounds(path: str) -> dict[str, Any]:
    """The label selector at `path` with its requirements, values and matchLabels at
    their bounds."""
    values = bound(f"{path}.matchExpressions.[].values")
    requirement = {"key": "k", "operator": "In", "values": ["v"] * values}
    return {
        "matchLabels": {f"l{i}": "v" for i in range(bound(f"{path}.matchLabels", "maxProperties"))},
        "matchExpressions": [requirement] * bound(f"{path}.matchExpressions"),
    }


def largest_spec() -> dict[str, Any]:
    """The SpyreModel spec with the most fields the schema checks that `validate` takes:
    every list and map of objects at its bound (the affinity as affinity_at_bounds, with
    its pod terms' namespaces and label keys; the spread constraints, tolerations, env,
    allowFrom peers, the compile pods' placement, labels and annotations), each value
    short."""
    at = affinity_at_bounds()
    pod = "affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.[]"
    keys = bound(f"{pod}.matchLabelKeys")
    term = {
        "topologyKey": "z",
        "labelSelector": selector_at_bounds(f"{pod}.labelSelector"),
        "namespaceSelector": selector_at_bounds(f"{pod}.namespaceSelector"),
        "namespaces": [f"n{i}" for i in range(bound(f"{pod}.namespaces"))],
        "matchLabelKeys": [f"m{i}" for i in range(keys)],
        "mismatchLabelKeys": [f"x{i}" for i in range(bound(f"{pod}.mismatchLabelKeys"))],
    }
    for side in ("podAffinity", "podAntiAffinity"):
        terms = at[side]
        terms["requiredDuringSchedulingIgnoredDuringExecution"] = [term] * len(
            terms["requiredDuringSchedulingIgnoredDuringExecution"]
        )
        terms["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 1, "podAffinityTerm": term}
        ] * len(terms["preferredDuringSchedulingIgnoredDuringExecution"])
    spread = "topologySpreadConstraints.[]"
    spreads = [
        {"maxSkew": 1, "topologyKey": f"z{i}", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": selector_at_bounds(f"{spread}.labelSelector"), "minDomains": 1,
         "matchLabelKeys": [f"m{i}" for i in range(bound(f"{spread}.matchLabelKeys"))],
         "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Honor"}
        for i in range(bound("topologySpreadConstraints"))
    ]  # fmt: skip
    peer = "service.allowFrom.[]"
    peers = [{"namespaceSelector": selector_at_bounds(f"{peer}.namespaceSelector"),
              "podSelector": selector_at_bounds(f"{peer}.podSelector")}
             ] * bound("service.allowFrom")  # fmt: skip
    toleration = {"key": "t", "operator": "Equal", "value": "v", "effect": "NoExecute",
                  "tolerationSeconds": 1}  # fmt: skip
    secret = {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}
    labels = {f"l{i}": "v" for i in range(bound("podLabels", "maxProperties"))}
    return PLAIN | {
        "affinity": at,
        "topologySpreadConstraints": spreads,
        "service": {"allowFrom": peers},
        "tolerations": [toleration] * bound("tolerations"),
        "cache": {
            "compile": {"nodeSelector": labels, "tolerations": [toleration] * bound("tolerations")}
        },
        "env": [{"name": f"E{i}", "valueFrom": secret} for i in range(bound("env"))],
        "extraArgs": ["a"] * bound("extraArgs"),
        "imagePullSecrets": [{"name": f"s{i}"} for i in range(bound("imagePullSecrets"))],
        "nodeSelector": labels,
        "podLabels": labels,
        "podAnnotations": labels,
    }


REQUEST_LIMIT = 3 * 1024 * 1024  # the API server's, of a JSON body
STORED_MOST = 3 * 1024 * 1024 // 2  # etcd's request limit: what a stored object can take


def at_the_limit() -> dict[str, Any]:
    """The worst a client can post: the affinity at its bounds (the most fields the schema
    checks), and unknown keys (decoded, then pruned) up to just below the request limit."""
    spec = PLAIN | {"affinity": affinity_at_bounds()}
    room = REQUEST_LIMIT - 50_000 - len(json.dumps(document("c00-000", spec)))
    return spec | {f"u{i:07d}": 0 for i in range(room // len('"u0000000": 0, '))}


LARGEST = "every list of the spec at its bound"


def cases(depth: int) -> dict[str, tuple[Callable[[], dict[str, Any]], str | None]]:
    """name -> (its spec, why it is not posted to the schema that keeps unknown fields)."""
    return {
        "plain": (lambda: PLAIN, None),
        f"maps {depth} deep in resources": (
            lambda: PLAIN | {"resources": {"limits": {"cpu": "1"}, "extra": nested(depth)}},
            None,
        ),
        f"maps {depth} deep in a toleration": (
            lambda: PLAIN | {"tolerations": [{"operator": "Exists", "x": nested(depth)}]},
            None,
        ),
        f"maps {depth} deep in rollout": (
            lambda: PLAIN | {"rollout": {"maxSurge": 1, "extra": nested(depth)}},
            None,
        ),
        "maps 200 deep in resources": (
            lambda: PLAIN | {"resources": {"extra": nested(200)}},
            "the cost grows exponentially with the depth",
        ),
        "60,000 unknown keys": (lambda: PLAIN | {f"k{i}": i for i in range(60_000)}, None),
        "1 MB of env values at their bound": (
            lambda: (
                PLAIN
                | {
                    "env": [{"name": f"E{i}", "value": "v" * 32768} for i in range(30)],
                    "rollout": {"maxSurge": "100%", "maxUnavailable": 100_000},
                    "cache": {"compile": {"minServingReplicas": 1000}},
                }
            ),
            None,
        ),
        "affinity lists at their bounds": (
            lambda: PLAIN | {"affinity": affinity_at_bounds()},
            None,
        ),
        LARGEST: (largest_spec, None),
        "the affinity + unknown keys to 3 MiB": (
            at_the_limit,
            "kept, 3 MiB is beyond etcd's limit (1.5 MiB)",
        ),
    }


def kept_unknown(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as it was before issue 31: every object of the spec but affinity (and the
    status) kept unknown fields for the webhook to name."""
    old = copy.deepcopy(crd)
    schema = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

    def keep(node: dict[str, Any], path: str) -> None:
        if path.endswith(".affinity"):
            return
        if "properties" in node:
            node["x-kubernetes-preserve-unknown-fields"] = True
            for name, sub in node["properties"].items():
                keep(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            keep(node["items"], path)

    keep(schema, "spec")
    return old


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def install(kube: Kube, crd: dict[str, Any]) -> None:
    url = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
    kube.request("PATCH", url, crd, content_type="application/apply-patch+yaml",
                 query={"fieldManager": "crd-cost", "force": "true"})  # fmt: skip


def serves(kube: Kube, namespace: str, keeps_unknown: bool) -> None:
    """Wait until the API server decodes SpyreModels with this schema (it reloads a
    changed CRD asynchronously): an unknown field is kept, or pruned."""

    def probe() -> bool:
        body = document("probe", PLAIN | {"probeField": 1})
        try:
            stored = kube.request("POST", f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}",
                                  body, query={"dryRun": "All"})  # fmt: skip
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


def document(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}


def flat(name: str, size: int) -> dict[str, Any]:
    """A Flat of `size` bytes as JSON, all in its one string: what any custom resource that
    large costs."""
    body: dict[str, Any] = {"apiVersion": FLAT_API, "kind": "Flat", "metadata": {"name": name}}
    body["spec"] = {"data": "x" * max(0, size - len(json.dumps(body)) - 22)}
    return body


def config_map(name: str, size: int) -> dict[str, Any]:
    """A ConfigMap of `size` bytes as JSON, all in one value: what a core kind that large
    costs (above its 1 MiB of data it is decoded, then refused by validation)."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    body["data"] = {"d": "x" * max(0, size - len(json.dumps(body)) - 14)}
    return body


def deployment(name: str, affinity: dict[str, Any]) -> dict[str, Any]:
    """A Deployment whose pods carry `affinity`: Kubernetes' own decoding and validation
    of the same fields (no controller runs: it is only stored)."""
    labels = {"app": "crd-cost"}
    pod = {"containers": [{"name": "c", "image": "i"}], "affinity": affinity}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}  # fmt: skip


def fields(value: Any) -> int:
    """The JSON nodes of a value (a map, a list and each scalar count one)."""
    if isinstance(value, dict):
        return 1 + sum(fields(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(fields(v) for v in value)
    return 1


def same_as_flat(body: dict[str, Any]) -> dict[str, Any]:
    """The same spec posted as a Flat (pruned to nothing there: decoded, not stored)."""
    return body | {"apiVersion": FLAT_API, "kind": "Flat"}


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
    print(f"  {'create':36} {'bytes':>9} {'CPU s':>8} {'x plain':>8} {'x flat':>6} "
          f"{'x same':>6} {'x cm':>6} {'wall s':>8} {'x plain':>8}")  # fmt: skip
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
        print(f"  {case:36} {size:>9} {cpu:>8.4f} {cpu / plain_cpu:>8.1f} "
              f"{beside_flat:>6} {cpu / same_spec:>6.1f} {cpu / same_cm:>6.1f} {wall:>8.3f} "
              f"{wall / plain_wall:>8.1f}")  # fmt: skip
    return costs


# The affinity's lists (terms, requirements, values), from one of each to beyond the CRD's
# bounds (4, 4, 8; 8, 8, 16 before): how the API server's cost grows with the fields its
# schema checks.
GROWTH = ((1, 1, 1), (2, 2, 4), (4, 4, 8), (8, 8, 16), (16, 16, 16))


def unbounded(node: Any) -> Any:
    """A schema without its maxItems and maxProperties."""
    if isinstance(node, dict):
        return {k: unbounded(v) for k, v in node.items() if k not in ("maxItems", "maxProperties")}
    return node


def placement_crd() -> dict[str, Any]:
    """A custom resource whose spec is the SpyreModel's affinity without its list bounds:
    the same checks on as many fields as asked."""
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    crd = copy.deepcopy(FLAT_CRD)
    crd["metadata"]["name"] = f"placements.{FLAT_GROUP}"
    crd["spec"]["names"] = {"kind": "Placement", "plural": "placements",
                            "singular": "placement", "listKind": "PlacementList"}  # fmt: skip
    (version,) = crd["spec"]["versions"]
    placed = unbounded(spec["properties"]["affinity"])
    version["schema"]["openAPIV3Schema"]["properties"]["spec"] = {
        "type": "object", "properties": {"affinity": placed}}  # fmt: skip
    return crd


def placement(name: str, placed: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": FLAT_API, "kind": "Placement", "metadata": {"name": name},
            "spec": {"affinity": placed}}  # fmt: skip


def growth(kube: Kube, pid: int, repeat: int, plain_cpu: float) -> None:
    """The affinity at a few sizes, in a Placement, each beside a Flat of its bytes and a
    Deployment whose pods carry the same affinity (Kubernetes' own validation of these
    fields, which bounds none of its lists), and the CPU per field beyond the Flat's."""
    namespace = "cost-growth"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    install(kube, placement_crd())
    accepts(kube, namespace, placement("probe", affinity(1, 1, 1)))
    print("\nthe affinity's size (terms x requirements x values) against its cost")
    print(f"  {'affinity':10} {'fields':>7} {'bytes':>8} {'CPU s':>8} {'x plain':>8} "
          f"{'x flat':>6} {'x dep':>6} {'us/field':>8}")  # fmt: skip
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
        print(f"  {f'{terms}x{requirements}x{values}':10} {checked:>7} {size:>8} {cpu:>8.4f} "
              f"{cpu / plain_cpu:>8.1f} {cpu / same_size:>6.1f} {cpu / dep:>6.1f} "
              f"{per_field:>8.1f}")  # fmt: skip


def parts(kube: Kube, pid: int, repeat: int, plain_cpu: float) -> None:
    """Each field of the largest spec alone (beside a plain spec), and its CPU per field
    beyond a Flat of its bytes: which bounds the cost comes from."""
    namespace = "cost-pruned"
    print("\nthe largest spec's fields, one at a time")
    print(f"  {'field':26} {'fields':>7} {'bytes':>8} {'CPU s':>8} {'x plain':>8} "
          f"{'x flat':>6} {'us/field':>8}")  # fmt: skip
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
        print(f"  {name:26} {checked:>7} {size:>8} {cpu:>8.4f} {cpu / plain_cpu:>8.1f} "
              f"{cpu / same_size:>6.1f} {per_field:>8.1f}")  # fmt: skip


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
                run(kube, apiserver, "before: the spec's objects keep unknown fields", True,
                    args.depth, args.repeat)  # fmt: skip
            install(kube, new)
            after = run(kube, apiserver, "after: the pruning schema", False, args.depth,
                        args.repeat)  # fmt: skip
            plain = max(after["plain"][0], 0.001)
            parts(kube, apiserver, args.repeat, plain)
            growth(kube, apiserver, args.repeat, plain)
            deep = max((c for c in after if "deep" in c), key=lambda c: after[c][0])
            big = [c for c in after if c != "plain" and "deep" not in c]  # the oversized
            stored = [c for c in big if not math.isnan(after[c][1])]
            flat_worst = max(stored, key=lambda c: after[c][0] / after[c][1])
            same_worst = max(big, key=lambda c: after[c][0] / after[c][2])
            limit = max(after, key=lambda c: after[c][0])
            print(f"\nwith the pruning schema, the worst nested create ({deep}) took "
                  f"{after[deep][0] / plain:.1f}x the API server's CPU of a plain create; "
                  f"the worst oversized one ({flat_worst}) "
                  f"{after[flat_worst][0] / after[flat_worst][1]:.1f}x a Flat of its size, "
                  f"and ({same_worst}) {after[same_worst][0] / after[same_worst][2]:.1f}x "
                  f"its spec posted as a Flat; the costliest ({limit}) "
                  f"{after[limit][0]:.3f} s, {after[limit][0] / after[limit][2]:.1f}x its spec "
                  "posted as a Flat; the largest valid spec "
                  f"{after[LARGEST][0] / plain:.1f}x a plain create (docs/api.md: 2x is out of "
                  "reach for it)")  # fmt: skip
        finally:
            plane.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
