"""serve/precompile/describe decisions, with vLLM replaced at its seams (exec, warmup child)."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from contractlib import contract_env
from spyre_runtime import cli, precompile, serve, space
from spyre_runtime.catalog import read_catalog, write_ready
from spyre_runtime.compilereport import REQUIRE_CACHED_ENV
from spyre_runtime.contract import READY_NAME

pytestmark = pytest.mark.unit

CONFIG = {"model": "/m", "maxModelLen": 256}
REPO = Path(__file__).resolve().parents[2]


class Exec(Exception):
    """Raised instead of exec'ing vLLM."""


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = contract_env("vllm-spyre", tmp_path, CONFIG, tmp_path / "termination-log")
    pod_tmp = tmp_path / "pod-tmp"  # the pod's temporary directory (an emptyDir)
    pod_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(pod_tmp))
    monkeypatch.setenv("HOME", str(tmp_path / "pod-home"))  # an emptyDir too
    for name in list(os.environ):
        if name.startswith(
            ("SPYRE_SERVING_", "TORCH_SENDNN_", "TORCHINDUCTOR_", "VLLM_SPYRE_", "SENDNN_")
        ) or name in ("VLLM_CACHE_ROOT", "XDG_CACHE_HOME"):
            monkeypatch.delenv(name)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, str]]]:
    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_exec(file: str, args: list[str], env: dict[str, str]) -> None:
        calls.append((args, env))
        raise Exec

    monkeypatch.setattr(serve.os, "execvpe", fake_exec)
    return calls


def summary(env: dict[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(Path(env["SPYRE_SERVING_TERMINATION_LOG"]).read_text())
    return result


def ready_cache(env: dict[str, str]) -> Path:
    cache_dir = Path(env["TORCH_SENDNN_CACHE_DIR"])
    cache_dir.mkdir()
    write_ready(cache_dir, {"cacheKey": env["SPYRE_SERVING_CACHE_KEY"], "config": CONFIG})
    return cache_dir


def test_serve_execs_vllm_with_the_cache_env(env: dict[str, str], execs: list[Any]) -> None:
    ready_cache(env)
    with pytest.raises(Exec):
        cli.main(["serve", "/m", "--port", "8001"])
    args, exec_env = execs[0]
    assert args[1:] == ["serve", "/m", "--port", "8001"]
    assert Path(args[0]).name == "vllm"
    assert exec_env["TORCH_SENDNN_CACHE_DIR"] == env["TORCH_SENDNN_CACHE_DIR"]
    # the compile report (spyre_runtime.compilereport) is loaded next to the plugin
    assert exec_env["VLLM_PLUGINS"] == "spyre,spyre_runtime"
    assert "torch" not in sys.modules and "vllm" not in sys.modules


def inductor_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("require", [False, True])
def test_serve_gives_inductor_its_own_copy_of_the_keys_cache(
    env: dict[str, str], execs: list[Any], monkeypatch: pytest.MonkeyPatch, require: bool
) -> None:
    """inductor writes even when every lookup hits: it gets a copy in the pod's temporary
    directory, and the key's directory stays as the compile Job left it."""
    cache_dir = ready_cache(env)
    graph = cache_dir / "inductor" / "fxgraph" / "ab" / "fabc"
    graph.parent.mkdir(parents=True)
    graph.write_bytes(b"compiled graph")
    monkeypatch.setenv("VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS", str(int(require)))
    before = inductor_files(cache_dir)
    with pytest.raises(Exec):
        cli.main(["serve", "/m"])
    exec_env = execs[0][1]
    private = Path(exec_env["TORCHINDUCTOR_CACHE_DIR"])
    assert private.parent == Path(tempfile.gettempdir()) and cache_dir not in private.parents
    assert inductor_files(private) == inductor_files(cache_dir / "inductor")
    assert inductor_files(cache_dir) == before
    # a start-up that would compile anyway is stopped (spyre_runtime.compilereport)
    assert exec_env.get(REQUIRE_CACHED_ENV) == ("1" if require else None)


@pytest.mark.parametrize("given", [None, "1"])
def test_the_job_and_serving_pods_agree_on_inductors_precompiled_header(
    env: dict[str, str],
    execs: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    given: str | None,
) -> None:
    """Off unless the pod's env says (the setting is in inductor's cache keys, so both
    kinds of pod get the same): a serving pod's cache hit then builds no header."""
    name = "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"
    if given is not None:
        monkeypatch.setenv(name, given)
    seen: dict[str, str] = {}

    def fake_warmup(cfg: Any, child_env: dict[str, str], progress: Any) -> dict[str, Any]:
        seen.update(child_env)
        return {"ok": True, "catalogData": {"MODEL_NAME": "/m"}, "timings": {}}

    monkeypatch.setattr(precompile, "_run_warmup", fake_warmup)
    assert cli.main(["precompile", str(tmp_path)]) == 0
    with pytest.raises(Exec):
        cli.main(["serve", "/m"])
    assert seen[name] == execs[0][1][name] == (given or "0")
    record = json.loads((Path(env["TORCH_SENDNN_CACHE_DIR"]) / READY_NAME).read_text())
    assert record["compilerEnv"] == {name: given or "0"}


@pytest.mark.parametrize(("recorded", "given", "runs_with"), [
    (None, None, None),  # compiled before the setting: inductor's default, as it was then
    (None, "0", "0"),  # the pod's env wins
    ({"TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0"}, None, "0"),
    ({"TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "1"}, None, "1"),
])  # fmt: skip
def test_a_serving_pod_compiles_with_the_settings_its_key_was_compiled_with(
    env: dict[str, str],
    execs: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    recorded: dict[str, str] | None,
    given: str | None,
    runs_with: str | None,
) -> None:
    """A key compiled before the header was turned off keeps loading (a new default must
    not turn every existing key into misses, or refusals under requirePrecompiled)."""
    name = "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"
    if given is not None:
        monkeypatch.setenv(name, given)
    cache_dir = ready_cache(env)
    if recorded is not None:
        record = json.loads((cache_dir / READY_NAME).read_text())
        write_ready(cache_dir, {**record, "compilerEnv": recorded})
    with pytest.raises(Exec):
        cli.main(["serve", "/m"])
    assert execs[0][1].get(name) == runs_with


@pytest.mark.parametrize("change", ["removed", "truncated"])
def test_serve_refuses_a_cache_whose_inductor_files_changed_since_the_compile(
    env: dict[str, str], execs: list[Any], monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """READY's manifest: a cache emptied (or cut short) by hand is seen before vLLM
    starts; files added since (another compile of the key) do not matter."""
    cache_dir = ready_cache(env)
    inductor = cache_dir / "inductor"
    (inductor / "fxgraph").mkdir(parents=True)
    for name in ("fxgraph/fa", "fxgraph/fb"):
        (inductor / name).write_bytes(b"graph")
    marker = json.loads((cache_dir / READY_NAME).read_text())
    write_ready(cache_dir, {**marker, "inductorFiles": {"fxgraph/fa": 5, "fxgraph/fb": 5}})
    (inductor / "fxgraph" / "added-later").write_bytes(b"x")
    with pytest.raises(Exec):
        cli.main(["serve", "/m"])  # all there: serves

    if change == "removed":
        (inductor / "fxgraph" / "fb").unlink()
    else:
        (inductor / "fxgraph" / "fb").write_bytes(b"gr")
    monkeypatch.setenv("VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS", "1")
    assert cli.main(["serve", "/m"]) == serve.EXIT_CACHE_NOT_READY
    assert len(execs) == 1
    result = summary(env)
    assert result["reason"] == "CacheNotReady"
    assert (
        "lacks 1 of the 2 inductor files its compile wrote (such as inductor/fxgraph/fb)"
        in (result["message"])
    )


def test_serve_copies_no_inductor_cache_of_a_key_not_ready(
    env: dict[str, str], execs: list[Any]
) -> None:
    """A key without READY may be half written (its compile Job still runs)."""
    partial = Path(env["TORCHINDUCTOR_CACHE_DIR"]) / "fxgraph"
    partial.mkdir(parents=True)
    (partial / "half").write_bytes(b"...")
    with pytest.raises(Exec):
        cli.main(["serve", "/m"])
    assert inductor_files(Path(execs[0][1]["TORCHINDUCTOR_CACHE_DIR"])) == {}


def test_an_inductor_cache_outside_the_key_is_refused(
    env: dict[str, str],
    execs: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/elsewhere")
    assert cli.main(["serve", "/m"]) == 2
    assert execs == []
    assert "TORCHINDUCTOR_CACHE_DIR=/elsewhere disagrees with" in caplog.text


def test_serve_without_a_cache_warns_and_runs(
    env: dict[str, str], execs: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(Exec):
        cli.main(["serve", "/m"])
    assert "never precompiled; vLLM will compile" in caplog.text


def test_require_precompiled_refuses_a_missing_cache(
    env: dict[str, str], execs: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS", "1")
    assert cli.main(["serve", "/m"]) == serve.EXIT_CACHE_NOT_READY
    assert execs == []
    result = summary(env)
    assert result["reason"] == "CacheNotReady"
    assert "VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS=1 but cache" in result["message"]


def test_require_precompiled_names_the_differing_fields(
    env: dict[str, str], execs: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ready_cache(env)
    monkeypatch.setenv("VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS", "1")
    monkeypatch.setenv("SPYRE_SERVING_COMPILE_CONFIG", json.dumps({**CONFIG, "maxModelLen": 64}))
    assert cli.main(["serve", "/m"]) == serve.EXIT_CACHE_NOT_READY
    assert "maxModelLen: READY has 256, this pod has 64" in summary(env)["message"]


def test_describe_shows_command_env_and_state(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    ready_cache(env)
    assert cli.main(["describe", "/m", "--max-model-len", "256"]) == 0
    out = capsys.readouterr().out
    assert "cache: READY" in out
    assert f"  TORCH_SENDNN_CACHE_DIR={env['TORCH_SENDNN_CACHE_DIR']}" in out
    assert "  VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS=0" in out
    assert out.rstrip().endswith("serve /m --max-model-len 256")


def test_usage_and_unknown_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    assert cli.main([]) == 2
    assert cli.main(["compile"]) == 2
    assert "usage: spyre-runtime" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "args", "reason", "message"),
    [
        ({"SPYRE_SERVING_CACHE_KEY": ""}, ["/m"], "InvalidConfig", "SPYRE_SERVING_CACHE_KEY must"),
        ({"SPYRE_SERVING_FLAVOUR": "x"}, ["/m"], "InvalidConfig", "SPYRE_SERVING_FLAVOUR='x'"),
        ({}, [], "InvalidConfig", "no vllm serve arguments"),
        ({}, ["/no/such/model"], "ModelNotFound", "/no/such/model does not exist"),
    ],
)
def test_precompile_fails_early_with_a_reason(
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    change: dict[str, str],
    args: list[str],
    reason: str,
    message: str,
) -> None:
    for name, value in change.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["precompile", *args]) != 0
    result = summary(env)
    assert (result["ok"], result["reason"]) == (False, reason)
    assert message in result["message"]
    assert not (Path(env["TORCH_SENDNN_CACHE_DIR"]) / READY_NAME).exists()


def test_precompile_publishes_catalog_then_ready(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = {"MODEL_NAME": str(tmp_path), "NUM_AIUS": 1, "VLLM_DT_MAX_CONTEXT_LEN": 256}
    seen: dict[str, Any] = {}

    def fake_warmup(cfg: Any, child_env: dict[str, str], progress: Any) -> dict[str, Any]:
        seen.update(child_env)
        assert not (Path(env["TORCH_SENDNN_CACHE_DIR"]) / READY_NAME).exists()
        (Path(env["TORCH_SENDNN_CACHE_DIR"]) / "graph.bin").write_bytes(b"g" * 5000)
        kernel = Path(child_env["TORCHINDUCTOR_CACHE_DIR"]) / "ab" / "cabc.so"
        kernel.parent.mkdir(parents=True)
        kernel.write_bytes(b"k" * 300)
        # vLLM's inspection of the model class, in the Job's HOME (modelinfo.py)
        info = Path(child_env["HOME"], ".cache/vllm/modelinfos/granite.json")
        info.parent.mkdir(parents=True)
        info.write_bytes(b"i" * 40)
        return {"ok": True, "catalogData": data, "timings": {"engineSeconds": 1.0}}

    monkeypatch.setattr(precompile, "_run_warmup", fake_warmup)
    monkeypatch.setenv("VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS", "1")
    assert cli.main(["precompile", str(tmp_path)]) == 0
    assert seen["VLLM_SPYRE_REQUIRE_PRECOMPILED_DECODERS"] == "0"
    cache_dir = Path(env["TORCH_SENDNN_CACHE_DIR"])
    (catalog_entry,) = read_catalog(cache_dir)
    assert catalog_entry["data"] == data
    assert "vllm_spyre_version" in catalog_entry
    ready = json.loads((cache_dir / READY_NAME).read_text())
    assert ready["cacheKey"] == env["SPYRE_SERVING_CACHE_KEY"]
    assert ready["config"] == CONFIG
    assert set(ready["versions"]) == {"spyre_runtime", "vllm", "vllm_spyre", "torch"}
    assert ready["timings"]["engineSeconds"] == 1.0
    # the warmup compiled into the key's inductor folder; READY keeps its manifest
    assert seen["TORCHINDUCTOR_CACHE_DIR"] == str(cache_dir / "inductor")
    assert ready["inductorFiles"] == {"ab/cabc.so": 300}
    catalog_bytes = (cache_dir / "pre_compiled_cache_catalog.json").stat().st_size
    lock_bytes = (cache_dir / ".catalog.lock").stat().st_size
    assert (cache_dir / "vllm-modelinfos" / "granite.json").read_bytes() == b"i" * 40
    assert ready["bytes"] == 5000 + 300 + 40 + catalog_bytes + lock_bytes
    assert summary(env) == {
        "ok": True,
        "cacheKey": env["SPYRE_SERVING_CACHE_KEY"],
        "seconds": ready["timings"]["totalSeconds"],
        "versions": ready["versions"],
        "bytes": ready["bytes"],
    }


def test_a_failed_warmup_leaves_no_ready(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def oom(*_: Any) -> dict[str, Any]:
        return {"ok": False, "reason": "OutOfMemory", "message": "killed"}

    monkeypatch.setattr(precompile, "_run_warmup", oom)
    assert cli.main(["precompile", str(tmp_path)]) == 1
    assert summary(env)["reason"] == "OutOfMemory"
    cache_dir = Path(env["TORCH_SENDNN_CACHE_DIR"])
    assert not (cache_dir / READY_NAME).exists() and read_catalog(cache_dir) == []


def test_a_compile_the_volume_cannot_hold_fails_before_the_warmup(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An earlier compile of the same model (another key) wrote 2 GB; 1 GB is free."""
    earlier = tmp_path / ("e" * 64)
    earlier.mkdir()
    write_ready(earlier, {"cacheKey": earlier.name, "config": CONFIG, "bytes": 2 * 10**9})
    monkeypatch.setattr(space.shutil, "disk_usage", lambda _: SimpleNamespace(free=10**9))

    def never(*_: Any) -> dict[str, Any]:
        raise AssertionError("the warmup must not start")

    monkeypatch.setattr(precompile, "_run_warmup", never)
    assert cli.main(["precompile", str(tmp_path)]) == 1
    result = summary(env)
    assert (result["ok"], result["reason"]) == (False, "OutOfSpace")
    assert "1.00 GB free" in result["message"] and "needs about 2.20 GB" in result["message"]
    assert "an earlier compile of /m wrote 2.00 GB" in result["message"]
    assert "spec.cache.volume.size" in result["message"]
    assert not (Path(env["TORCH_SENDNN_CACHE_DIR"]) / READY_NAME).exists()


def test_space_needed_comes_from_the_same_models_earlier_compiles(tmp_path: Path) -> None:
    def compiled(key: str, model: str, size: int | None, files: int = 0) -> None:
        (tmp_path / key).mkdir()
        (tmp_path / key / "graph.bin").write_bytes(b"x" * files)
        record = {"cacheKey": key, "config": {"model": model}}
        write_ready(tmp_path / key, record if size is None else {**record, "bytes": size})

    assert space.earlier_bytes(tmp_path, "/m", "k0") is None
    compiled("k1", "/m", 700)
    compiled("k2", "/m", None, files=900)  # READY of an older runtime: measured instead
    compiled("k3", "/other", 10**6)
    (tmp_path / "k4").mkdir()  # a compile that never finished counts for nothing
    (tmp_path / "k4" / "graph.bin").write_bytes(b"x" * 10**6)
    measured = space.tree_bytes(tmp_path / "k2")  # its graph and its READY
    assert 900 < measured < 1000 and space.earlier_bytes(tmp_path, "/m", "k0") == measured
    assert space.earlier_bytes(tmp_path, "/m", "k2") == 700  # never itself
    need = math.ceil(measured * space.HEADROOM)
    assert space.shortfall(tmp_path, "k0", "/m", free=need) is None
    assert space.shortfall(tmp_path, "k0", "/m", free=need - 1) is not None
    (tmp_path / "k0").mkdir()  # a retry: what the killed attempt wrote is already there
    (tmp_path / "k0" / "graph.bin").write_bytes(b"x" * 100)
    assert space.shortfall(tmp_path, "k0", "/m", free=need - 100) is None
    first = space.shortfall(tmp_path, "k9", "/new", free=space.FLOOR_BYTES - 1)
    assert first is not None and "compiled here for the first time" in first
    assert space.shortfall(tmp_path, "k9", "/new", free=space.FLOOR_BYTES) is None


def test_containerfile_keeps_the_base_images_torch() -> None:
    lines = (REPO / "image" / "Containerfile").read_text().splitlines()
    code = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert code[0].startswith("ARG BASE_IMAGE=") and "FROM ${BASE_IMAGE}:${BASE_TAG}" in code
    assert [c for c in code if c.startswith("USER")][-1] == "USER 2000"
    assert code[-2] == 'ENTRYPOINT ["/usr/local/bin/spyre-entrypoint"]'
    installs = [c for c in code if "pip install" in c]
    assert installs and all("--no-deps" in c and "torch" not in c for c in installs)
    entrypoint = (REPO / "image" / "entrypoint").read_text()
    assert "source /etc/profile.d/ibm-aiu-setup.sh" in entrypoint
    assert entrypoint.rstrip().endswith('exec spyre-runtime "$@"')


def _as_uid(uid: int, check: Any) -> Any:
    """check() in a forked child running as uid (root passes every mode check)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to uid, report, never return into pytest
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.write(write, json.dumps(check()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        got = answer.read()
    os.waitpid(pid, 0)
    return json.loads(got)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run the check as another uid")
def test_a_model_folder_the_pod_cannot_read_is_named_not_a_traceback() -> None:
    """Seen on the real node: a hostPath model folder of mode 0700 owned by root."""
    model = Path(tempfile.mkdtemp(prefix="spyre-model-"))  # under /tmp, not pytest's 0700 tree
    try:
        problem = _as_uid(65534, lambda: precompile._local_model_problem(str(model)))
        expected = f"model path {model} is not readable by uid 65534 (check the volume's modes)"
        assert problem == expected
        model.chmod(0o755)
        assert _as_uid(65534, lambda: precompile._local_model_problem(str(model))) is None
    finally:
        shutil.rmtree(model)
