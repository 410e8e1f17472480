"""`validate` checks the document around the spec as the API server does (issue 31): the
top-level keys and metadata fields it knows, labels and annotations by its rules, and no
NUL character in a string; each refused with the field and the rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from apilib import BASE, merge, with_spec
from kubernetes import client
from test_api_kubernetes_types import wire_names

from spyre_operator.api.document import OBJECT_META
from spyre_operator.api.labels import ANNOTATIONS_MAX_BYTES
from spyre_operator.api.problem import Problem
from spyre_operator.api.validation import review, validate
from spyre_operator.cli import main
from spyre_operator.webhook.review import answer

pytestmark = pytest.mark.unit


def file_problems(doc: Any) -> list[Problem]:
    return review(doc, from_file=True).problems


def test_the_metadata_fields_are_those_of_the_kubernetes_client() -> None:
    assert set(OBJECT_META) == wire_names(client.V1ObjectMeta)


FIELDS = {
    "a key beside spec": (
        merge(BASE, {"replicas": 2}),
        "replicas",
        "unknown field (fields here: apiVersion, kind, metadata, spec, status)",
    ),
    "a misspelt spec": (
        merge(BASE, {"spce": {}}),
        "spce",
        "unknown field: did you mean spec?",
    ),
    "a misspelt metadata field": (
        merge(BASE, {"metadata": {"label": {"team": "a"}}}),
        "metadata.label",
        "unknown field: did you mean labels?",
    ),
    "another misspelt metadata field": (
        merge(BASE, {"metadata": {"anotations": {}}}),
        "metadata.anotations",
        "unknown field: did you mean annotations?",
    ),
}


@pytest.mark.parametrize(("doc", "path", "message"), FIELDS.values(), ids=FIELDS.keys())
def test_unknown_top_level_keys_and_metadata_fields_are_refused_in_a_file(
    doc: dict[str, Any], path: str, message: str
) -> None:
    assert [(p.path, p.message) for p in file_problems(doc)] == [(path, message)]
    # the webhook and the operator read what the API server decoded: whatever a newer
    # Kubernetes adds to an object's metadata must not make every SpyreModel invalid
    assert validate(doc) == []


def test_the_validate_command_names_them_with_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.yaml"
    text = yaml.safe_dump(merge(BASE, {"metadata": {"lables": {"a": "b"}}}))
    path.write_text(text + '  extraArgs: ["--seed=\\0"]\n')  # YAML's escape of NUL
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: demo: metadata.lables: unknown field: did you mean labels?",
        f"{path}: demo: spec.extraArgs[0]: {NUL} (the container runtime, vLLM, the kubelet) "
        "end the string: remove it",
    ]


NUL = "contains a NUL character (\\x00), where the programs that read it"
EVERYWHERE = {
    "an env value": (
        with_spec({"env": [{"name": "A", "value": "a\x00b"}]}),
        "spec.env[0].value",
        NUL,
    ),
    "an annotation value": (
        merge(BASE, {"metadata": {"annotations": {"note": "\x00"}}}),
        "metadata.annotations.note",
        NUL,
    ),
    "a label key": (
        merge(BASE, {"metadata": {"labels": {"bad key!": "a"}}}),
        'metadata.labels["bad key!"]',
        "'bad key!' is not a label key: an optional DNS subdomain prefix and '/'",
    ),
    "a label value of 64 characters": (
        merge(BASE, {"metadata": {"labels": {"team": "a" * 64}}}),
        "metadata.labels.team",
        "'" + "a" * 64 + "' is not a label value: empty, or at most 63 letters",
    ),
    "a label value that is a number": (
        merge(BASE, {"metadata": {"labels": {"version": 2}}}),
        "metadata.labels.version",
        "keys and values must be strings, got 'version': 2: quote them in YAML",
    ),
    "labels that are a list": (
        merge(BASE, {"metadata": {"labels": ["team=a"]}}),
        "metadata.labels",
        "must be a mapping of strings",
    ),
    "an annotation key": (
        merge(BASE, {"metadata": {"annotations": {"example.com/": "x"}}}),
        'metadata.annotations["example.com/"]',
        "'example.com/' is not an annotation key",
    ),
    "annotations over 256 KiB": (
        merge(BASE, {"metadata": {"annotations": {"a": "x" * ANNOTATIONS_MAX_BYTES}}}),
        "metadata.annotations",
        f"keys and values come to {ANNOTATIONS_MAX_BYTES + 1} bytes; Kubernetes allows "
        f"{ANNOTATIONS_MAX_BYTES} in all",
    ),
}


@pytest.mark.parametrize(("doc", "path", "message"), EVERYWHERE.values(), ids=EVERYWHERE.keys())
def test_metadata_and_strings_are_checked_by_validate_the_webhook_and_the_operator(
    doc: dict[str, Any], path: str, message: str
) -> None:
    problems = validate(doc)
    assert [p.path for p in problems] == [path], problems
    assert problems[0].message.startswith(message), problems[0].message
    assert file_problems(doc) == problems
    assert answer("CREATE", doc, None).refusal == str(problems[0])


def test_labels_and_annotations_kubernetes_takes_pass() -> None:
    doc = merge(
        BASE,
        {
            "metadata": {
                "labels": {"app.kubernetes.io/part-of": "ai", "empty": "", "a" * 63: "b" * 63},
                # an annotation key is checked lowercased, as Kubernetes does
                "annotations": {"Example.com/Note": "free text: ünïcode\nand lines", "n": ""},
            }
        },
    )
    assert file_problems(doc) == []


def test_a_nul_in_a_shared_alias_bomb_is_found_quickly() -> None:
    bomb: Any = ["x", "\x00"]
    for _ in range(30):
        bomb = [bomb, bomb]  # 2**31 strings if written out, 31 lists
    problems = validate(with_spec({"extraArgs": bomb}))
    assert [p.message for p in problems if p.message.startswith("contains a NUL")] == [
        NUL + " (the container runtime, vLLM, the kubelet) end the string: remove it"
    ]


def test_a_nul_in_a_key_is_named_besides_the_keys_own_rule() -> None:
    problems = validate(with_spec({"nodeSelector": {"zone\x00": "a"}}))
    assert [p.path for p in problems] == ["spec.nodeSelector['zone\\x00']"] * 2
    assert problems[0].message.startswith(f"its key {NUL}")
    assert "is not a label key" in problems[1].message
