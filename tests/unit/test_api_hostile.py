"""Hostile and malformed SpyreModels (issue 18): each class the fuzz run found is a named
regression test. Nothing crashes or hangs, messages are bounded, integer fields are strict,
and what reaches vLLM is what was validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from apilib import (
    AFFINITY,
    BASE,
    EXAMPLES,
    HOSTILE_YAML,
    IMAGE_REFERENCES,
    alias_bomb,
    merge,
    with_spec,
)

from spyre_operator.api import arg_rules, rules
from spyre_operator.api.placement_rules import PREFERRED, REQUIRED
from spyre_operator.api.problem import InvalidSpec, Problem
from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.api.validation import MAX_PROBLEMS, parse, validate
from spyre_operator.cli import main
from spyre_operator.webhook.review import answer

pytestmark = pytest.mark.unit

EXAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "micro-granite-cpu.yaml").read_text()
# Every message quotes at most ~200 characters of a value; a line has a path and advice too.
LINE_LIMIT = 1000
# A hang guard, not a timing: each of these inputs takes milliseconds (benchmarks/
# hostile_bench.py prints how many beside a plain spec's), and the naive walk or pattern
# each is there for would take hours.
HANG = 120


def problems_of(obj: Any) -> list[Problem]:
    """validate's problems, which parse (the operator) and the webhook report the same."""
    problems = validate(obj)
    with pytest.raises(InvalidSpec) as raised:
        parse(obj)
    assert raised.value.problems == problems
    assert answer("CREATE", obj, None).refusal == "\n".join(map(str, problems))
    assert all(len(str(p)) < LINE_LIMIT for p in problems), problems
    return problems


def only(obj: Any) -> Problem:
    problems = problems_of(obj)
    assert len(problems) == 1, problems
    return problems[0]


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, command: str) -> str:
    path = tmp_path / "model.yaml"
    path.write_text(text)
    assert main([command, str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.startswith(f"{path}: ") and len(err) < 4 * LINE_LIMIT, err
    return err


# --- 1. nothing crashes, hangs or explodes -------------------------------------------


@pytest.mark.parametrize(
    "cpu", ["1e400", "9" * 400, "1" * 40 + "e400"], ids=["1e400", "400 digits", "long exponent"]
)
def test_a_cpu_quantity_that_overflows_a_float_is_a_problem(cpu: str) -> None:
    problem = only(with_spec({"resources": {"limits": {"cpu": cpu}}}))
    assert problem.path == "spec.resources.limits.cpu"
    assert problem.message.startswith("must be a Kubernetes") or problem.message == (
        f"{cpu} is more than Kubernetes counts: use e.g. 8 or 64Gi"
    )


def test_a_400_digit_integer_quantity_is_a_problem() -> None:
    problem = only(with_spec({"resources": {"requests": {"memory": 10**400}}}))
    assert problem.path == "spec.resources.requests.memory"
    assert "got a number of about 401 digits" in problem.message


def test_a_runtime_version_past_pythons_digit_limit_is_a_problem() -> None:
    version = "1" * 6000 + ".0.0"
    problem = only(with_spec({"runtime": {"version": version}}))
    assert problem.path == "spec.runtime.version"
    assert problem.message == "must have at most 64 characters, got 6004"
    # within the bound, the rule compares the major part as text
    problem = only(with_spec({"runtime": {"version": "1" * 50 + ".0.0"}}))
    assert "sendnn-inference versions are 2.x, got 1111" in problem.message


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"batching": {"continuous": {"maxNumBatchedTokens": "1000"}}}, "maxNumBatchedTokens"),
        (
            {
                "runtime": {"flavour": "vllm-spyre"},
                "task": "embed",
                "batching": {
                    "continuous": None,
                    "static": {"promptLens": ["2000"], "batchSizes": [1]},
                },
            },
            "promptLens[0]",
        ),
    ],
    ids=["maxNumBatchedTokens", "promptLens"],
)
def test_a_numeric_string_on_a_multiple_of_64_field_is_a_problem(
    patch: dict[str, Any], path: str
) -> None:
    problem = only(with_spec(patch))
    assert problem.path.endswith(path)
    assert "must be an integer, got '" in problem.message
    assert ": write it without quotes (" in problem.message


@pytest.mark.timeout(HANG)
def test_an_alias_bomb_built_in_memory_is_checked_with_a_short_message() -> None:
    """The webhook and the operator get JSON, which has no aliases, but a shared object
    (what YAML aliases build) must not be walked or printed in full either."""
    problem = only(with_spec({"nodeSelector": {"a": alias_bomb()}}))
    assert problem.path == "spec.nodeSelector.a"
    assert problem.message == "must be a string, got a list"


def test_a_huge_string_is_quoted_clipped() -> None:
    problem = only(merge(BASE, {"metadata": {"name": "x" * 600_000}}))
    assert problem.path == "metadata.name"
    assert "'xxxx" in problem.message and "... (600000 characters)" in problem.message


def test_a_huge_key_is_quoted_clipped_in_the_path() -> None:
    problems = problems_of(with_spec({"nodeSelector": {"k\n" * 10_000: 1}}))
    assert len(problems[0].path) < 300 and "\n" not in str(problems[0])


@pytest.mark.parametrize(
    "patch",
    [
        {"podAnnotations": {"k" * 300_000 + "/x": "v"}},
        {"podLabels": {"team": "v" * 300_000}},
        {"model": {"path": "/data/" + "m" * 4000, "source": {"pvc": {"claimName": "m"}}}},
    ],
    ids=["annotation key", "label value", "model path"],
)
def test_values_checked_by_the_rules_are_quoted_clipped(patch: dict[str, Any]) -> None:
    problems_of(with_spec(patch))  # every line is short


def test_one_objects_problems_are_bounded() -> None:
    env = [{"name": f"A{i}", "value": 1} for i in range(60)]
    problems = problems_of(with_spec({"env": env}))
    assert len(problems) == MAX_PROBLEMS + 1
    assert str(problems[-1]) == "spec: and 10 more problems"


def test_a_rule_that_raises_names_itself_instead_of_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(spec: SpyreModelSpec) -> Any:
        raise OverflowError("int too large to convert to float")
        yield

    monkeypatch.setattr(rules, "RULES", (*rules.RULES, broken))
    problem = only(BASE)
    assert problem.path == "spec"
    assert problem.message.startswith(
        "the broken rule cannot check this spec (OverflowError: int too large"
    )


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize(("text", "message"), HOSTILE_YAML.values(), ids=HOSTILE_YAML.keys())
def test_hostile_yaml_is_one_line_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    for command in ("validate", "render"):
        err = run(tmp_path, capsys, text, command)
        assert message in err and err.count("\n") == 1, err
        assert f'in "{tmp_path / "model.yaml"}", line ' in err


def test_a_file_larger_than_a_kubernetes_request_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = run(tmp_path, capsys, "# " + "x" * (3 * 1024 * 1024), "validate")
    assert "invalid YAML: 3145729 characters: more than the 3145728 a Kubernetes request" in err


def test_aliases_and_merge_keys_of_ordinary_size_are_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = EXAMPLE.replace(
        '  resources:\n    requests: {cpu: "2", memory: 8Gi}\n',
        '  resources:\n    requests: &req {cpu: "2", memory: 8Gi}\n',
    ).replace('    limits: {cpu: "4", memory: 16Gi}', '    limits: {<<: *req, cpu: "4"}')
    path = tmp_path / "model.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


# --- 2. strict where Kubernetes is strict --------------------------------------------

STRICT = {
    "maxNumSeqs '32'": (
        {"batching": {"continuous": {"maxNumSeqs": "32"}}},
        "spec.batching.continuous.maxNumSeqs",
        "must be an integer, got '32': write it without quotes (32)",
    ),
    "maxNumSeqs true": (
        {"batching": {"continuous": {"maxNumSeqs": True}}},
        "spec.batching.continuous.maxNumSeqs",
        "must be an integer, got true",
    ),
    "service.port '4'": (
        {"service": {"port": "4"}},
        "spec.service.port",
        "must be an integer, got '4': write it without quotes (4)",
    ),
    "replicas 1.5": (
        {"replicas": 1.5},
        "spec.replicas",
        "must be an integer, got 1.5: use a whole number",
    ),
    "batchSizes ['100']": (
        {
            "task": "embed",
            "batching": {"continuous": None, "static": {"promptLens": [64], "batchSizes": ["100"]}},
        },
        "spec.batching.static.batchSizes[0]",
        "must be an integer, got '100'",
    ),
    "tensorParallelSize '2'": (
        {"tensorParallelSize": "2"},
        "spec.tensorParallelSize",
        "must be one of 1, 2 or 4, got '2'",
    ),
    "prefixCaching 'true'": (
        {"batching": {"continuous": {"prefixCaching": "true"}}},
        "spec.batching.continuous.prefixCaching",
        "must be true or false, got 'true': write it without quotes (true)",
    ),
}


@pytest.mark.parametrize(("patch", "path", "message"), STRICT.values(), ids=STRICT.keys())
def test_integer_and_boolean_fields_take_no_strings(
    patch: dict[str, Any], path: str, message: str
) -> None:
    problem = only(with_spec(patch))
    assert (problem.path, problem.message[: len(message)]) == (path, message)


@pytest.mark.parametrize(
    ("namespace", "got"),
    [
        (False, "got false"),  # `namespace: NO` in YAML
        (1024, "got 1024"),
        ("Team_A", "got 'Team_A'"),
        ("a\u200bb", "got 'a\\u200bb'"),
        ("team\n", "got 'team\\n'"),
        ("n" * 70_000, "... (70000 characters)"),
    ],
    ids=["NO", "int", "uppercase", "zero-width", "trailing newline", "70000 characters"],
)
def test_the_namespace_is_checked_as_kubernetes_checks_it(namespace: object, got: str) -> None:
    problem = only(merge(BASE, {"metadata": {"namespace": namespace}}))
    assert problem.path == "metadata.namespace"
    assert problem.message.startswith("must be a namespace name, a DNS-1123 label")
    assert got in problem.message


@pytest.mark.parametrize("namespace", ["team-a", "0ns", ""])
def test_namespace_names_kubernetes_takes(namespace: str) -> None:
    assert validate(merge(BASE, {"metadata": {"namespace": namespace}})) == []


def test_a_name_with_a_trailing_newline_is_refused() -> None:
    assert only(merge(BASE, {"metadata": {"name": "demo\n"}})).path == "metadata.name"


def test_duplicate_keys_are_an_error_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = EXAMPLE.replace("  name: micro-granite-cpu\n", "  namespace: ai\n  namespace: ml\n")
    err = run(tmp_path, capsys, text, "validate")
    assert "found the key 'namespace' twice (first on line 6): keep one" in err
    assert "line 7, column 3" in err


@pytest.mark.parametrize(
    ("patch", "path", "message"),
    [
        ({"resources": {"status": {}}}, "spec.resources.status", "unknown field (fields here: "),
        (
            {"runtime": {"tolerations": []}},
            "spec.runtime.tolerations",
            "unknown field (fields here: architecture, flavour, imageProfile, version)",
        ),
        (
            {"env": [{"name": "A", "valueFrom": {"secretKeyRf": {"name": "s", "key": "k"}}}]},
            "spec.env[0].valueFrom.secretKeyRf",
            "unknown field: did you mean secretKeyRef?",
        ),
        (
            {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabel": {}},
                    }
                ]
            },
            "spec.topologySpreadConstraints[0].labelSelector.matchLabel",
            "unknown field: did you mean matchLabels?",
        ),
    ],
    ids=["resources", "runtime", "in a list", "deep in a list"],
)
def test_did_you_mean_suggests_only_fields_valid_at_that_level(
    patch: dict[str, Any], path: str, message: str
) -> None:
    problem = only(with_spec(patch))
    assert (problem.path, problem.message[: len(message)]) == (path, message)


LEAKS = ("Input should", "instance of", "Spec", "Resources", "EnvVar", "String should")


@pytest.mark.parametrize(
    "patch",
    [
        {"runtime": "x"},
        {"resources": []},
        {"cache": 5},
        {"env": [1]},
        {"model": {"servedName": ""}},
        {"imagePullSecrets": [{"name": "a" * 300}]},
        {"extraArgs": "--seed=1"},
        {"nodeSelector": ["a"]},
        {"topologySpreadConstraints": [{}] * 9},
    ],
)
def test_no_pydantic_class_names_or_text_reach_a_user(patch: dict[str, Any]) -> None:
    for problem in problems_of(with_spec(patch)):
        assert not any(leak in problem.message for leak in LEAKS), problem


def test_size_messages_in_plain_words() -> None:
    assert only(with_spec({"model": {"servedName": ""}})).message == "must not be empty"
    long_name = only(with_spec({"imagePullSecrets": [{"name": "a" * 300}]})).message
    assert long_name.startswith("must have at most 253 characters, got 300")
    too_many = only(with_spec({"imagePullSecrets": [{"name": "a"}] * 17})).message
    assert too_many == "must have at most 16 items, got 17"


# --- 3. what Kubernetes refuses in a child is refused before anything runs -----------

OBJECT_NAME = "must match ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$, got "
NODE_TERM = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
POD_TERM = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"


def _node_requirement(**requirement: Any) -> dict[str, Any]:
    term = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", **requirement}]}]}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}}


def _deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(levels):
        node = {"n": node}
    return node


REFUSED_BY_KUBERNETES = {
    # found by tests/integration/test_api_fuzz_on_server.py
    "hugepages requested below a limit that is not set": (
        {"resources": {"requests": {"hugepages-2Mi": "1Gi", "memory": "1Gi"}}},
        'spec.resources.requests["hugepages-2Mi"]',
        "hugepages-2Mi cannot be overcommitted: set limits.hugepages-2Mi to the same amount",
    ),
    "hugepages without cpu or memory": (
        {"cache": {"compile": {"resources": {"limits": {"hugepages-2Mi": "1Gi"}}}}},
        "spec.cache.compile.resources.limits",
        "hugepages need cpu or memory set too",
    ),
    "env secretKeyRef name that is not a Secret name": (
        {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "A", "key": "k"}}}]},
        "spec.env[0].valueFrom.secretKeyRef.name",
        "",
    ),
    "env fieldRef of a whole map": (
        {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]},
        "spec.env[0].valueFrom.fieldRef.fieldPath",
        "'metadata.labels' is not a field Kubernetes passes to env: use one of metadata.name",
    ),
    "env fieldRef of a label that cannot be": (
        {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['-x']"}}}]},
        "spec.env[0].valueFrom.fieldRef.fieldPath",
        "'-x' is not a label key",
    ),
    "env fieldRef of another apiVersion": (
        {
            "env": [
                {
                    "name": "A",
                    "valueFrom": {
                        "fieldRef": {"fieldPath": "metadata.name", "apiVersion": "apps/v1"}
                    },
                }
            ]
        },
        "spec.env[0].valueFrom.fieldRef.apiVersion",
        "'apps/v1': a pod's fields are v1",
    ),
    "env configMapKeyRef key with a slash": (
        {"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "a", "key": "a/b"}}}]},
        "spec.env[0].valueFrom.configMapKeyRef.key",
        "",
    ),
    "toleration Exists with a value": (
        {"tolerations": [{"key": "k", "operator": "Exists", "value": "x"}]},
        "spec.tolerations[0].value",
        "must be empty with operator Exists (every value matches): remove value",
    ),
    "toleration Equal without a key": (
        {"tolerations": [{"operator": "Equal", "effect": "NoSchedule"}]},
        "spec.tolerations[0].operator",
        "must be Exists when key is empty (a toleration of every taint): set a key",
    ),
    "toleration without key or operator": (
        {"tolerations": [{"value": "v"}]},
        "spec.tolerations[0].operator",
        "must be Exists when key is empty",
    ),
    "tolerationSeconds without NoExecute": (
        {"tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 5}]},
        "spec.tolerations[0].effect",
        "must be NoExecute when tolerationSeconds is set",
    ),
    "toleration key not a qualified name": (
        {"tolerations": [{"key": "bad key!", "operator": "Exists"}]},
        "spec.tolerations[0].key",
        "'bad key!' is not a taint key: an optional DNS subdomain prefix",
    ),
    "toleration value not a label value": (
        {"tolerations": [{"key": "k", "value": "a b"}]},
        "spec.tolerations[0].value",
        "'a b' is not a label value",
    ),
    "compile toleration Exists with a value": (
        {"cache": {"compile": {"tolerations": [{"operator": "Exists", "value": "x"}]}}},
        "spec.cache.compile.tolerations[0].value",
        "must be empty with operator Exists",
    ),
    "nodeSelector value with spaces": (
        {"nodeSelector": {"k": "bad value with spaces"}},
        "spec.nodeSelector.k",
        "'bad value with spaces' is not a label value",
    ),
    "nodeSelector key not a label key": (
        {"nodeSelector": {"bad key!": "v"}},
        'spec.nodeSelector["bad key!"]',
        "'bad key!' is not a label key",
    ),
    "compile nodeSelector value": (
        {"cache": {"compile": {"nodeSelector": {"a": "b c"}}}},
        "spec.cache.compile.nodeSelector.a",
        "'b c' is not a label value",
    ),
    "requests above limits": (
        {"resources": {"requests": {"memory": "64Gi"}, "limits": {"memory": "1Gi"}}},
        "spec.resources.requests.memory",
        "64Gi is more than the limit 1Gi: a container may not request more than it may use",
    ),
    "cpu limit under the request": (
        {"cache": {"compile": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": ".5"}}}}},
        "spec.cache.compile.resources.requests.cpu",
        "2 is more than the limit .5",
    ),
    "a quantity with a trailing newline": (
        {"resources": {"limits": {"memory": "8Gi\n"}}},
        "spec.resources.limits.memory",
        "must be a Kubernetes quantity such as 8, 7500m or 64Gi, got '8Gi\\n'",
    ),
    "a quantity past int64": (
        {"resources": {"requests": {"cpu": "9e18"}}},
        "spec.resources.requests.cpu",
        "9e18 is more than Kubernetes counts",
    ),
    "unqualified resource name": (
        {"resources": {"limits": {"extraArg": 1}}},
        "spec.resources.limits.extraArg",
        "'extraArg' is not a container resource: use cpu, memory, ephemeral-storage",
    ),
    "resource name with a space": (
        {"resources": {"limits": {"example.com/Bad Resource": 1}}},
        'spec.resources.limits["example.com/Bad Resource"]',
        "'example.com/Bad Resource' is not a resource name",
    ),
    "extended resource overcommitted": (
        {"resources": {"requests": {"example.com/dev": "1"}}},
        'spec.resources.requests["example.com/dev"]',
        "example.com/dev cannot be overcommitted: set limits.example.com/dev to the same",
    ),
    "extended resource in fractions": (
        {"resources": {"limits": {"example.com/dev": "500m"}}},
        'spec.resources.limits["example.com/dev"]',
        "example.com/dev is counted in whole units, got 500m",
    ),
    "affinity that is no object": (
        {"affinity": {"nodeAffinity": "not-an-object"}},
        "spec.affinity.nodeAffinity",
        "must be a mapping of fields, got 'not-an-object'",
    ),
    "affinity nested 20 levels": (
        {"affinity": {"nodeAffinity": _deep(20)}},
        "spec.affinity.nodeAffinity.n",
        "unknown field (fields here: preferredDuringScheduling",
    ),
    "pod anti-affinity term without topologyKey": (
        {"affinity": {"podAntiAffinity": {REQUIRED: [{"labelSelector": {}}]}}},
        f"{POD_TERM}.topologyKey",
        "required field is missing",
    ),
    "node requirement In without values": (
        _node_requirement(operator="In"),
        f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values",
        "required with operator In",
    ),
    "node requirement Exists with values": (
        _node_requirement(operator="Exists", values=["x"]),
        f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values",
        "operator Exists takes none",
    ),
    "node requirement Gt not an integer": (
        _node_requirement(operator="Gt", values=["x"]),
        f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values",
        "operator Gt takes exactly one integer",
    ),
    "node requirement Lt past int64": (
        _node_requirement(operator="Lt", values=[str(2**63)]),
        f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values",
        "operator Lt takes exactly one integer",
    ),
    "node requirement key": (
        _node_requirement(key="a b", operator="Exists"),
        f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].key",
        "'a b' is not a node label key",
    ),
    "no node selector term": (
        {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}}},
        f"{NODE_TERM}.nodeSelectorTerms",
        "must have at least 1 item",
    ),
    "affinity weight 0": (
        {
            "affinity": {
                "podAffinity": {PREFERRED: [{"weight": 0, "podAffinityTerm": {"topologyKey": "z"}}]}
            }
        },
        f"spec.affinity.podAffinity.{PREFERRED}[0].weight",
        "must be at least 1, got 0",
    ),
    "affinity namespace": (
        {
            "affinity": {
                "podAntiAffinity": {REQUIRED: [{"topologyKey": "z", "namespaces": ["A_b"]}]}
            }
        },
        f"{POD_TERM}.namespaces[0]",
        "'A_b' is not a namespace name",
    ),
    "cache claim name": (
        {"cache": {"volume": {"claimName": "Bad_Claim"}}},
        "spec.cache.volume.claimName",
        OBJECT_NAME + "'Bad_Claim' (a Kubernetes object name",
    ),
    "cache claim name with DEL": (
        {"cache": {"volume": {"claimName": "\x7fspyre-graph-cache"}}},
        "spec.cache.volume.claimName",
        OBJECT_NAME + "'\\x7fspyre-graph-cache'",
    ),
    "model claim name": (
        {"model": {"id": None, "path": "/models/m", "source": {"pvc": {"claimName": "M"}}}},
        "spec.model.source.pvc.claimName",
        OBJECT_NAME + "'M'",
    ),
    "storage class": (
        {"cache": {"volume": {"storageClassName": "bad class"}}},
        "spec.cache.volume.storageClassName",
        OBJECT_NAME + "'bad class'",
    ),
    "cache size 0": (
        {"cache": {"volume": {"size": "0"}}},
        "spec.cache.volume.size",
        "must be more than 0, got '0': the claim's size",
    ),
    "image with spaces": (
        {"image": " quay.io/x:1 "},
        "spec.image",
        "' quay.io/x:1 ' has leading or trailing whitespace, which Kubernetes refuses in a pod",
    ),
    "image with an uppercase name": (
        {"image": "quay.io/Org/x:1"},
        "spec.image",
        "'quay.io/Org/x:1' is not an image reference: [registry[:port]/]name[:tag][@digest]",
    ),
    "scheduler name with spaces": (
        {"schedulerName": "Not A Scheduler!"},
        "spec.schedulerName",
        "'Not A Scheduler!' cannot name a scheduler",
    ),
}


@pytest.mark.parametrize(
    ("patch", "path", "message"), REFUSED_BY_KUBERNETES.values(), ids=REFUSED_BY_KUBERNETES.keys()
)
def test_pass_through_fields_kubernetes_refuses_are_refused_offline(
    patch: dict[str, Any], path: str, message: str
) -> None:
    problem = only(with_spec(patch))
    assert (problem.path, problem.message[: len(message)]) == (path, message)


ACCEPTED_BY_KUBERNETES = {
    "env from the pod's fields": {
        "env": [
            {"name": f"F{i}", "valueFrom": {"fieldRef": {"fieldPath": path, "apiVersion": "v1"}}}
            for i, path in enumerate(
                [
                    "metadata.name",
                    "status.podIP",
                    "metadata.labels['example.com/tier']",
                    "metadata.annotations['a']",
                    "spec.serviceAccountName",
                ]
            )
        ]
    },
    "tolerations": {
        "tolerations": [
            {"operator": "Exists"},
            {"key": "example.com/gpu", "operator": "Equal", "value": "a", "effect": "NoSchedule"},
            {"key": "k", "effect": "NoExecute", "tolerationSeconds": 30},
        ]
    },
    "resources": {
        "resources": {
            "requests": {"cpu": "500m", "memory": "1Gi", "example.com/dev": 2},
            "limits": {"cpu": 1, "memory": "1Gi", "example.com/dev": "2", "hugepages-2Mi": "1Gi"},
        }
    },
    "image by digest on a registry with a port": {
        "image": "localhost:5000/org/x-y__z.w:1.0_rc@sha256:" + "a" * 64
    },
    "affinity": {"affinity": AFFINITY},
    "placement": {"nodeSelector": {"kubernetes.io/arch": "amd64", "empty": ""}},
}


@pytest.mark.parametrize(
    "patch", ACCEPTED_BY_KUBERNETES.values(), ids=ACCEPTED_BY_KUBERNETES.keys()
)
def test_pass_through_fields_kubernetes_takes_pass(patch: dict[str, Any]) -> None:
    assert validate(with_spec(patch)) == []


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize("image", IMAGE_REFERENCES)
def test_an_image_reference_that_backtracks_a_naive_pattern_is_answered(image: str) -> None:
    problems_of(with_spec({"image": image}))


# --- 4. what reaches vLLM is exactly what was validated ------------------------------

REFUSED_ARGS = {
    "--max_model_len=4096": "--max-model-len",
    "--max_model_len": "--max-model-len",
    "--served_model_name=x": "--served-model-name",
    "--max-model": "--max-model-len",
    "--tensor_parallel_size=2": "--tensor-parallel-size",
    "--enable_prefix_caching": "--enable-prefix-caching",
    "-tp=2": "-tp",
    "-t": "-tp",
    "-qgptq": "-q",
    "--config=/models/c.yaml": "--config",
}


@pytest.mark.parametrize(("arg", "flag"), REFUSED_ARGS.items(), ids=REFUSED_ARGS.keys())
def test_extra_args_cannot_set_a_rendered_flag_under_any_spelling(arg: str, flag: str) -> None:
    problem = only(with_spec({"extraArgs": ["--seed=1", arg]}))
    assert problem.path == "spec.extraArgs[1]"
    field = arg_rules.RENDERED_FLAGS[flag].split(" ")[0]
    option, is_set, _ = arg.partition("=")  # the value is never repeated (it may be a key)
    shown = option + ("=..." if is_set else "")
    assert problem.message.startswith(f"{shown!r} sets {flag}, which the operator renders: set ")
    assert f"set {field}" in problem.message


def test_an_ambiguous_prefix_names_every_flag_it_could_set() -> None:
    problem = only(with_spec({"extraArgs": ["--max-num=4"]}))
    assert "sets --max-num-seqs or --max-num-batched-tokens" in problem.message


@pytest.mark.parametrize(
    "args",
    [["--seed", "1"], ["--trust-remote-code"], ["--max-log-len=10"], ["--model-impl=vllm"]],
)
def test_other_extra_args_pass(args: list[str]) -> None:
    assert validate(with_spec({"extraArgs": args})) == []


ON_A_VOLUME = {"path": "/models/m", "source": {"pvc": {"claimName": "m"}}}


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ({"servedName": "--port"}, "spec.model.servedName"),
        ({**ON_A_VOLUME, "id": "-x"}, "spec.model.id"),
        ({"id": "--help"}, "spec.model.id"),
        ({"revision": "--no-such-flag"}, "spec.model.revision"),
    ],
    ids=["servedName", "id of a volume model", "hub id", "hub revision"],
)
def test_values_that_become_arguments_never_start_with_a_dash(
    model: dict[str, Any], path: str
) -> None:
    assert only(with_spec({"model": model})).path == path


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_examples_stay_valid(example: Path) -> None:
    assert main(["validate", str(example)]) == 0
