"""`spyre-operator crd | render | validate`: exit codes and messages, never a traceback."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from apilib import BASE, COMMIT, EXAMPLES, ROOT, merge

from spyre_operator.api.crd import CACHE_CRD_FILES, CRD_FILES
from spyre_operator.cli import main
from spyre_operator.cli.render import CHART_SCHEMA

pytestmark = pytest.mark.unit

GRANITE = str(ROOT / "examples" / "granite-3.3-8b-instruct.yaml")


def _write(tmp_path: Path, text: str, name: str = "model.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_validate_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *map(str, EXAMPLES)]) == 0
    out, err = capsys.readouterr()
    assert f"{GRANITE}: granite-8b-instruct: valid" in out.splitlines()
    assert err == ""


def test_validate_prints_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = merge(
        BASE,
        {
            "spec": {
                "tensorParallelSize": 3,
                "batching": {"continuous": {"maxNumBatchedTokens": 1000}},
            }
        },
    )
    good = merge(BASE, {"metadata": {"name": "fine"}})
    path = _write(tmp_path, yaml.safe_dump_all([bad, good]))
    assert main(["validate", path]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"{path}: demo: spec.tensorParallelSize: must be one of 1, 2 or 4, got 3 "
        "(vLLM-Spyre runs tensor parallel on 1, 2 or 4 cards)",
        f"{path}: demo: spec.batching.continuous.maxNumBatchedTokens: must be a multiple of 64, "
        "got 1000: use 960 or 1024 (the prefill chunk is a multiple of Spyre's KV block size "
        "(64); 1024-4096 is recommended)",
    ]
    assert out == f"{path}: fine: valid\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [1, 2\n", "invalid YAML: while parsing a flow sequence"),
        ("", "no YAML documents"),
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {}\n",
            "x: kind: expected apiVersion serving.spyre.dev/v1alpha1 kind SpyreModel, "
            "got apps/v1/Deployment",
        ),
        ("- 1\n- 2\n", "document 1: expected a SpyreModel object (a mapping), got a list"),
        (b"\xff\xfe".decode("latin-1"), "cannot read"),
    ],
    ids=["bad yaml", "empty", "wrong kind", "not a mapping", "not utf-8"],
)
def test_bad_files_are_reported_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "model.yaml"
    path.write_bytes(text.encode("latin-1"))
    for command in ("validate", "render"):
        assert main([command, str(path)]) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"{path}: ") and message in err, err
        assert "Traceback" not in err and out == ""


def test_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/nonexistent/model.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "/nonexistent/model.yaml: cannot read: [Errno 2] No such file or directory"
    )


def test_validate_warns_off_the_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, yaml.safe_dump(merge(BASE, {"spec": {"model": {"id": "acme/llm"}}})))
    assert main(["validate", path]) == 0
    assert capsys.readouterr().err.startswith(f"{path}: demo: warning: acme/llm is not in")


def test_validate_matches_a_model_config_by_architecture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model on a volume has no id: its config.json finds the registry entry."""
    on_pvc = {"id": None, "path": "/models/m", "source": {"pvc": {"claimName": "m"}}}
    batching = {"continuous": {"maxModelLen": 8192, "maxNumSeqs": 8}}
    path = _write(
        tmp_path, yaml.safe_dump(merge(BASE, {"spec": {"model": on_pvc, "batching": batching}}))
    )
    assert main(["validate", path]) == 0
    assert capsys.readouterr().err == ""  # no id, no config: nothing to look up
    granite = {
        "model_type": "granite", "num_hidden_layers": 40, "max_position_embeddings": 131072,
        "hidden_size": 4096, "vocab_size": 49159, "num_key_value_heads": 8,
        "num_attention_heads": 32,
    }  # fmt: skip
    config = _write(tmp_path, json.dumps(granite), "config.json")
    assert main(["validate", path, "--model-config", config]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: demo: warning: /models/m (matched by its model config): ")
    assert "for ibm-granite/granite-3.3-8b-instruct: (1, 3072, 16)" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [("{", "cannot read the model config"), ("[1]", "not a model config.json")],
)
def test_validate_refuses_a_bad_model_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    config = _write(tmp_path, text, "config.json")
    assert main(["validate", GRANITE, "--model-config", config]) == 2
    assert message in capsys.readouterr().err


def test_validate_reads_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(Path(GRANITE).read_text()))
    assert main(["validate", "-"]) == 0
    assert capsys.readouterr().out == "-: granite-8b-instruct: valid\n"


def test_render_prints_the_children(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", GRANITE, "--uid", "u-1", "--commit", COMMIT]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "PersistentVolumeClaim", "Job", "Job", "NetworkPolicy", "Deployment", "Service"
    ]  # fmt: skip
    assert docs[4]["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    subpaths = [
        m.get("subPath")
        for m in docs[4]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    ]
    assert f"weights/ibm-granite/granite-3.3-8b-instruct/{COMMIT}" in subpaths


def test_render_says_what_waits_for_the_commit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", GRANITE]) == 0
    out, err = capsys.readouterr()
    assert [d["kind"] for d in yaml.safe_load_all(out)] == [
        "PersistentVolumeClaim",
        "Job",
        "NetworkPolicy",
        "Service",
    ]
    assert "depend on the commit that revision main resolves to; pass --commit" in err
    with pytest.raises(SystemExit):
        main(["render", GRANITE, "--commit", "main"])
    assert "'main' is not a full commit (40 hex digits)" in capsys.readouterr().err


def test_render_uses_the_namespace_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, yaml.safe_dump(merge(BASE, {"metadata": {"namespace": None}})))
    assert main(["render", path, "--namespace", "team"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {d["metadata"]["namespace"] for d in docs} == {"team"}


@pytest.mark.parametrize(("platform", "fs_group"), [("kubernetes", 2000), ("openshift", None)])
def test_render_platform_flag(
    platform: str, fs_group: int | None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", GRANITE, "--platform", platform, "--commit", COMMIT]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Job", "Deployment")]
    assert [p["securityContext"].get("fsGroup") for p in pods] == [fs_group] * 3


def test_render_refuses_an_unknown_platform(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["render", GRANITE, "--platform", "gke"])
    assert exited.value.code == 2
    assert "invalid choice: 'gke'" in capsys.readouterr().err


def test_crd_prints_the_committed_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == 0
    out = capsys.readouterr().out
    docs = [d["spec"]["names"]["kind"] for d in yaml.safe_load_all(out)]
    assert docs == ["SpyreModel", "SpyreCache"]


def test_crd_write_regenerates_both_copies_and_the_charts_settings_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = tmp_path / CHART_SCHEMA
    schema.parent.mkdir(parents=True)
    text = json.loads((ROOT / CHART_SCHEMA).read_text())
    text["properties"]["operator"]["properties"]["workers"] = {"type": "integer"}  # drifted
    schema.write_text(json.dumps(text))
    assert main(["crd", "--write", "--root", str(tmp_path)]) == 0
    for name in (*CRD_FILES, *CACHE_CRD_FILES, CHART_SCHEMA):
        assert (tmp_path / name).read_text() == (ROOT / name).read_text()
    assert capsys.readouterr().out.count("wrote ") == 5


FLEET = ROOT / "examples/caches/micro-granite-fleet.yaml"


def test_a_precompile_fleet_validates_and_renders_only_its_compile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", str(FLEET)]) == 0
    assert capsys.readouterr().out.count(": valid") == 2
    assert main(["render", "--namespace", "ai", "--uid", "u1", str(FLEET)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    kinds = [(d["kind"], d["metadata"]["labels"]["app.kubernetes.io/component"]) for d in docs]
    volume, weights, compile_ = (
        ("PersistentVolumeClaim", "graph-cache"),
        ("Job", "weights"),
        ("Job", "compile"),
    )
    assert kinds == [volume, weights, compile_] * 2  # no serving objects
    jobs = [d for d in docs if kinds[docs.index(d)] == compile_]
    assert len({j["metadata"]["name"] for j in jobs}) == 2  # two configurations, two keys
    owners = [j["metadata"]["ownerReferences"][0] for j in jobs]
    assert {(o["kind"], o["controller"]) for o in owners} == {("SpyreCache", False)}
