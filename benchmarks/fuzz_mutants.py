"""The mutants of benchmarks/fuzz.py: an example (examples/*.yaml) changed by one
mutation kind (KINDS), deterministic for a seed, and 1 MB files of each shape."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
MB = 1024 * 1024

UNICODE = [
    "\u202eRTL",
    "a\u200bb",
    "nul\x00",
    "\uff47\uff52\uff41\uff4e\uff49\uff54\uff45",
    "🙂🚀",
    "é",
    "\ufeffbom",
    "a\nb",
]
NUMBERS: list[Any] = [
    math.nan,
    math.inf,
    -1,
    0,
    1.5,
    10**400,
    "1e400",
    "9" * 500,
    "32",
    "0x10",
    2**63,
    -(2**63),
]
# Values Kubernetes refuses (or takes) in the pass-through fields and the rollout: path -> values.
FIELDS: dict[tuple[str, ...], list[Any]] = {
    ("tolerations",): [
        [{"operator": "Exists", "value": "x"}],
        [{"operator": "Equal", "effect": "NoSchedule"}],
        [{"key": "k", "tolerationSeconds": 5}],
        [{"key": "bad key!", "operator": "Exists"}],
        [{"key": "k", "value": "a b"}],
        [{"key": "example.com/k", "operator": "Exists", "effect": "NoExecute"}],
    ],
    ("nodeSelector",): [{"k": "bad value with spaces"}, {"bad key!": "v"}, {"a/b/c": "v"}],
    ("cache", "compile", "nodeSelector"): [{"a": "b c"}, {"-a": "b"}],
    ("resources",): [
        {"requests": {"memory": "64Gi"}, "limits": {"memory": "1Gi"}},
        {"requests": {"cpu": "2"}, "limits": {"cpu": ".5"}},
        {"requests": {"cpu": "9e18"}},
        {"limits": {"extraArg": 1}},
        {"limits": {"Bad Resource": 1}},
        {"requests": {"example.com/dev": 1}},
        {"limits": {"example.com/dev": "500m"}},
        {"requests": {"cpu": 2, "memory": "1Gi"}, "limits": {"cpu": 4, "memory": "2Gi"}},
    ],
    ("affinity",): [
        {"nodeAffinity": "not-an-object"},
        {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}},
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]
                }
            }
        },
        {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]
            }
        },
        {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b c"}}}
                ]
            }
        },
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "cards", "operator": "Gt", "values": ["3"]}]}
                    ]
                }
            }
        },
    ],
    ("image",): [" quay.io/x:1 ", "quay.io/Org/x:1", "x:", "quay.io/x@sha256:12", "a b", "x"],
    ("schedulerName",): ["Not A Scheduler!", "\x00", "spyre-scheduler"],
    ("cache", "volume", "claimName"): ["Bad_Claim", "\x7fspyre-graph-cache", "a" * 254],
    ("cache", "volume", "storageClassName"): ["bad class", "Fast", "fast.example.com"],
    ("cache", "volume", "size"): ["0", "0Gi", "-1Gi", "1e400", "10Gi", 0],
    ("cache", "compile", "minServingReplicas"): [-1, 0, 1, 1000, 1001, "1", True, 1.5, 2**63],
    ("rollout",): [
        {"maxSurge": 0, "maxUnavailable": 0},
        {"maxSurge": "0%", "maxUnavailable": "0%"},
        {"maxSurge": "1"},
        {"maxSurge": "150%", "maxUnavailable": "100%"},
        {"maxUnavailable": -1},
        {"maxSurge": 1.5},
        {"maxSurge": "25 %"},
        {"maxSurge": 100_001},
        {"maxSurge": 1, "maxUnavailable": 0},
        {"maxSurge": "25%", "maxUnavailable": 2},
    ],
}


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += paths(value, (*prefix, i))
    return out


def _parent(doc: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = doc
    for part in path[:-1]:
        node = node[part]
    return node


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node = doc
    for part in path[:-1]:
        if isinstance(node, dict) and not isinstance(node.get(part), dict | list):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def _alias_bomb(depth: int, width: int) -> str:
    """A flow sequence whose last item expands to width**depth leaves."""
    levels = ["&a0 [" + ", ".join(["x"] * width) + "]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, depth)]
    return "[" + ", ".join(levels) + "]"


DEEP = "__deep__"  # placeholders replaced in the YAML text (PyYAML's dumper recurses)


def mutate(rng: random.Random, doc: dict[str, Any], text: str) -> tuple[str, str]:
    """(kind, YAML text) of one mutant of an example."""
    kind = rng.choice(KINDS)
    doc = copy.deepcopy(doc)
    path = rng.choice(paths(doc)[1:])
    in_a_mapping = [p for p in paths(doc)[1:] if isinstance(_parent(doc, p), dict)]
    deep = ""
    if kind == "types":
        _set(doc, path, rng.choice([None, True, 7, "text", [1, "a"], {"a": 1}, 1.25, []]))
    elif kind == "sizes":
        n = rng.choice([300, 5000, 70_000, 600_000])
        _set(
            doc,
            path,
            rng.choice(["x" * n, ["x"] * (n // 100), {f"k{i}": i for i in range(n // 300)}]),
        )
    elif kind == "unicode":
        _set(doc, path, rng.choice(UNICODE))
    elif kind == "numbers":
        _set(doc, path, rng.choice(NUMBERS))
    elif kind == "unknown":
        where = rng.choice(in_a_mapping)[:-1]
        _set(doc, (*where, rng.choice(["tensorParalelSize", "x", "status", "kind"])), 1)
    elif kind == "delete":
        del _parent(doc, path)[path[-1]]
    elif kind == "nesting":
        levels = rng.choice([20, 100, 500, 2000])
        opener, closer = rng.choice([("[", "]"), ("{a: ", "}")])
        deep = opener * levels + closer * levels
        _set(doc, rng.choice([("spec", "affinity", "nodeAffinity"), path]), DEEP)
    elif kind == "aliases":
        deep = _alias_bomb(rng.randint(3, 9), rng.randint(3, 9))
        _set(doc, rng.choice([("spec", "nodeSelector", "a"), ("spec", "affinity")]), DEEP)
    elif kind == "field":
        where = rng.choice(list(FIELDS))
        _set(doc, ("spec", *where), copy.deepcopy(rng.choice(FIELDS[where])))
    if kind == "duplicates":
        lines = text.splitlines(keepends=True)
        i = rng.randrange(len(lines))
        return kind, "".join([*lines[: i + 1], lines[i], *lines[i + 1 :]])
    if kind == "syntax":
        cut = rng.randrange(len(text))
        broken = rng.choice(
            [text[:cut], text[:cut] + "\t" + text[cut:], text + "{[", "\x00" + text]
        )
        return kind, broken
    out = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000)
    return kind, out.replace(DEEP, deep) if deep else out


KINDS = [
    "types",
    "sizes",
    "unicode",
    "numbers",
    "unknown",
    "delete",
    "nesting",
    "aliases",
    "duplicates",
    "syntax",
    "field",
    "field",
    "field",  # the pass-through fields weigh more
]


def mutants(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    sources = [(yaml.safe_load(p.read_text()), p.read_text()) for p in EXAMPLES]
    return [mutate(rng, *rng.choice(sources)) for _ in range(n)]


def one_megabyte_files() -> dict[str, str]:
    """Two 1 MB files: an example with 1 MB of values (valid) and with 1 MB of keys."""
    doc = yaml.safe_load((ROOT / "examples" / "micro-granite-cpu.yaml").read_text())
    values = copy.deepcopy(doc)
    values["spec"]["extraArgs"] = [f"--x{i}=" + "v" * 8000 for i in range(128)]
    keys = copy.deepcopy(doc)
    keys["spec"]["podAnnotations"] = {f"example.com/k{i:07d}": "v" for i in range(MB // 28)}
    return {
        name: yaml.safe_dump(d, width=10_000) for name, d in (("values", values), ("keys", keys))
    }
