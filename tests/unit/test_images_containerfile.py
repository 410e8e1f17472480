"""The local image builder reads the project's real Containerfiles (pure parts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spyre_devcluster.images import build, debian, recipes, rootfs
from spyre_devcluster.images.containerfile import ContainerfileError, parse
from spyre_devcluster.images.oci import ImageConfig
from spyre_devcluster.images.store import ImageBuildError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
BASE = ImageConfig(env=(("PATH", "/usr/bin"),), cmd=("python3",))


def test_operator_containerfile_plan() -> None:
    text = (ROOT / "operator" / "Containerfile").read_text()
    assert build.base_ref(text, {}) == "python:3.11-slim"
    plan = build.plan(text, {}, BASE)
    assert plan.config.user == "65532:65532"
    assert plan.config.env_dict() == {
        "PATH": "/usr/bin",
        "HOME": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    assert plan.config.entrypoint == ("spyre-operator",)
    assert plan.config.cmd == ("run",)
    copies = [s for s in plan.steps if isinstance(s, build.Copy)]
    assert [c.sources for c in copies] == [
        ("pyproject.toml", "README.md"),
        ("operator/src",),
        ("image/src",),
    ]
    (run,) = [s for s in plan.steps if isinstance(s, build.Run)]
    assert run.argv[:2] == ("/bin/sh", "-c")
    assert run.argv[2].startswith('python3 -m pip install --no-cache-dir "/tmp/spyre-serving')
    assert run.argv[2].endswith("&& spyre-operator --version")
    assert run.user == ""  # RUN comes before USER: it runs as root


def test_runtime_containerfile_plan_with_local_base() -> None:
    text = (ROOT / "image" / "Containerfile").read_text()
    args = {"BASE_IMAGE": "localhost/spyre-serving/runtime-cpu-base", "BASE_TAG": "t1"}
    assert build.base_ref(text, args) == "localhost/spyre-serving/runtime-cpu-base:t1"
    assert build.base_ref(text, {}) == "quay.io/ibm-aiu/vllm-spyre:1.10.0.amd64"
    # upstream's <version>.<arch> tags, the architecture from `--platform` (TARGETARCH)
    upstream = {"BASE_IMAGE": "quay.io/ibm-aiu/sendnn-inference", "BASE_VERSION": "2.6.3"}
    assert (
        build.base_ref(text, {**upstream, "TARGETARCH": "s390x"})
        == "quay.io/ibm-aiu/sendnn-inference:2.6.3.s390x"
    )
    plan = build.plan(text, {**args, "FLAVOUR": "sendnn-inference"}, BASE)
    assert dict(plan.config.labels) == {
        "org.opencontainers.image.title": "spyre-serving runtime",
        "io.spyre-serving.flavour": "sendnn-inference",
    }
    assert plan.config.user == "2000"
    assert plan.config.entrypoint == ("/usr/local/bin/spyre-entrypoint",)
    assert plan.config.cmd == ("describe",)
    entrypoint = plan.steps[-1]
    assert isinstance(entrypoint, build.Copy)
    assert (entrypoint.sources, entrypoint.dest, entrypoint.chmod) == (
        ("image/entrypoint",),
        "/usr/local/bin/spyre-entrypoint",
        0o755,
    )
    (run,) = [s for s in plan.steps if isinstance(s, build.Run)]
    assert run.user == "0" and dict(run.env)["FLAVOUR"] == "sendnn-inference"
    assert "FLAVOUR" not in plan.config.env_dict()  # ARGs are not baked into the image


def test_entrypoint_drops_the_inherited_cmd_and_env_legacy_form() -> None:
    text = 'FROM x\nENV A 1 2\nENV B=${A}-b\nENTRYPOINT ["/e"]\n'
    plan = build.plan(text, {}, BASE)
    assert plan.config.cmd is None
    assert plan.config.env_dict()["B"] == "1 2-b"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("FROM x\nADD a /b\n", "line 2: ADD is not supported"),
        ("FROM x\nFROM y\n", "exactly one FROM"),
        ("RUN true\n", "exactly one FROM"),
        ("FROM x AS build\n", "only `FROM <image>`"),
        ("FROM x\nRUN a \\\n", "ends inside a continued line"),
        ("FROM x\nCOPY --chown=1 a /b\n", "unsupported flag --chown"),
        ("FROM x\nCOPY a b c\n", "destination must end with /"),
        ("FROM x\nCMD [1, 2]\n", "JSON list of strings"),
    ],
)
def test_unsupported_or_broken_input_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(ContainerfileError, match=message):
        build.plan(text, {}, BASE)


def test_continuations_and_comments_inside_them() -> None:
    (frm, run) = parse("FROM x\n# note\nRUN a \\\n  # inside\n  && b\n")
    assert (frm.keyword, run.line, run.args) == ("FROM", 3, "a && b")


def test_containerignore_keeps_bytecode_out(tmp_path: Path) -> None:
    (tmp_path / ".containerignore").write_text("**/__pycache__\n**/*.pyc\n")
    pkg = tmp_path / "src" / "pkg"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"x")
    (pkg / "m.py").write_text("x = 1\n")
    (pkg / "stray.pyc").write_bytes(b"x")
    assert [rel for rel, _ in build.context_files(tmp_path, "src")] == ["pkg/m.py"]
    before = build.context_digest(tmp_path, (build.Copy(("src",), "/s", None, ""),))
    (pkg / "__pycache__" / "n.cpython-311.pyc").write_bytes(b"y")
    assert build.context_digest(tmp_path, (build.Copy(("src",), "/s", None, ""),)) == before
    with pytest.raises(ImageBuildError, match="no such file in the build context"):
        build.context_files(tmp_path, "../elsewhere")


def test_mirror_comes_from_either_apt_sources_format() -> None:
    deb822 = (
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://mirror.example/security\n"
        "Suites: bookworm-security\n"
    )
    assert debian._deb822_mirrors(deb822, "bookworm") == ["http://mirror.example/debian"]
    assert debian._deb822_mirrors(deb822, "trixie") == []
    one_line = "# comment\ndeb [arch=amd64] http://m.example/debian bookworm main\n"
    assert debian._one_line_mirrors(one_line, "bookworm") == ["http://m.example/debian"]


def test_python_layer_leaves_out_host_packages_and_tests() -> None:
    keep = recipes._python_keep("3.11")
    assert keep("bin/python3.11") and keep("bin/pip3")
    assert not keep("bin/aws")
    assert keep("lib/python3.11/os.py") and keep("lib/python3.11/site-packages/pip")
    assert not keep("lib/python3.11/site-packages/moto")
    assert not keep("lib/python3.11/test") and not keep("lib/python3.11/test/test_os.py")


def test_venv_layer_leaves_out_the_editable_project_install(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    info = site / "spyre_serving-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "RECORD").write_text(
        "../../../bin/spyre-runtime,sha256=x,1\n_editable_impl_spyre_serving.pth,sha256=y,2\n"
        "spyre_serving-0.1.0.dist-info/RECORD,,\n"
    )
    keep = recipes._venv_keep(tmp_path)
    assert not keep("bin/spyre-runtime")
    assert not keep("lib/python3.11/site-packages/_editable_impl_spyre_serving.pth")
    assert not keep("lib/python3.11/site-packages/spyre_serving-0.1.0.dist-info")
    assert not keep(".spyre-runtime-src")
    assert keep("bin/python3") and keep("lib/python3.11/site-packages/vllm")


def test_pip_config_paths_are_mounted_with_index_folders(tmp_path: Path) -> None:
    (tmp_path / "pypi" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "ca.crt").write_text("x")
    env = {
        "PIP_EXTRA_INDEX_URL": f"file://{tmp_path}/pypi/simple https://pypi.example/simple",
        "PIP_FIND_LINKS": f"{tmp_path}/wheels {tmp_path}/missing",
        "PIP_CERT": f"{tmp_path}/ca.crt",
        "PIP_DEFAULT_TIMEOUT": "180",
    }
    # an index page links to files beside its folder: the folder around it is mounted
    assert rootfs.local_paths(env) == [tmp_path / "ca.crt", tmp_path / "pypi", tmp_path / "wheels"]
