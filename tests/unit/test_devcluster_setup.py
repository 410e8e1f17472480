"""The local control plane's setup logic: binary lookup, install steps, tool unpacking."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from spyre_devcluster import install, install_steps, tools
from spyre_devcluster.binaries import BinariesMissing, GoBuild, find_binaries

pytestmark = pytest.mark.unit


def executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_kubebuilder_assets_win_and_controller_manager_is_optional(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executable(tmp_path / "etcd")
    executable(tmp_path / "kube-apiserver")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    found = find_binaries()
    assert (found.etcd, found.apiserver, found.controller_manager) == (
        tmp_path / "etcd",
        tmp_path / "kube-apiserver",
        None,
    )
    assert found.source == "KUBEBUILDER_ASSETS"


def test_incomplete_assets_name_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    executable(tmp_path / "etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    with pytest.raises(BinariesMissing, match=f"KUBEBUILDER_ASSETS={tmp_path} does not hold"):
        find_binaries()


def test_empty_cache_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("SPYRE_SERVING_CACHE", str(tmp_path))
    with pytest.raises(BinariesMissing, match="spyre-operator cluster install"):
        find_binaries()


def test_a_failing_step_names_itself_its_output_and_the_fix() -> None:
    lines: list[str] = []
    with pytest.raises(install_steps.InstallError) as err:
        install_steps.run("build-x", ["sh", "-c", "echo compiling; echo boom >&2; exit 7"],
                     "free some disk", lines.append)  # fmt: skip
    message = str(err.value)
    assert message.startswith("step 'build-x' failed")
    assert "exited with 7" in message
    assert "boom" in message
    assert "what to do: free some disk" in message
    assert err.value.step == "build-x"
    assert lines == ["[build-x] $ sh -c echo compiling; echo boom >&2; exit 7"]


def test_a_missing_program_is_an_install_error_not_a_traceback() -> None:
    with pytest.raises(install_steps.InstallError, match="cannot run no-such-program-here"):
        install_steps.run("x", ["no-such-program-here"], "install it", lambda _: None)


def test_installing_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(install_steps.InstallError, match="KUBEBUILDER_ASSETS"):
        install_steps.require_root("apt-get install")


def go_module(folder: Path, go: str, source: str) -> GoBuild:
    """A one-package Go module of our own, built offline by the real go command."""
    folder.mkdir()
    (folder / "go.mod").write_text(f"module example.test/tiny\n\ngo {go}\n")
    (folder / "go.sum").write_text("")
    (folder / "main.go").write_text(source)
    return GoBuild(folder, "example.test/tiny", "v1.2.3")


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the go command")
def test_a_go_build_is_stamped_with_its_version_and_keyed_by_go_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPYRE_SERVING_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GOTOOLCHAIN", "local")
    source = (
        'package main\n\nimport "fmt"\n\nvar gitVersion = "none"\n\n'
        "func main() { fmt.Println(gitVersion) }\n"
    )
    build = go_module(tmp_path / "tiny", "1.21", source)
    kubernetes_style = install.VERSION_VARIABLES["k8s.io/kubernetes"][1]
    monkeypatch.setitem(install.VERSION_VARIABLES, build.module, ("main", kubernetes_style))
    before = build.bin_dir()
    install._go_build(build, {"tiny": "."}, lambda _: None)
    assert subprocess.run([before / "tiny"], capture_output=True, text=True).stdout == "v1.2.3\n"
    assert before.name.startswith("tiny-v1.2.3-")
    (build.folder / "go.sum").write_text("example.test/other v1.0.0 h1:x=\n")
    assert build.bin_dir() != before
    after = build.bin_dir()
    (build.folder / "main.go").write_text(source + "// a program of ours changed\n")
    assert build.bin_dir() != after


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the go command")
def test_prometheus_module_versions_name_its_releases() -> None:
    """The Prometheus object's `version` and the binary's stamp come from go.mod's
    module version (Prometheus 3 publishes v0.3MM.p for 3.MM.p)."""
    assert install.prometheus_release("v0.305.0") == "3.5.0"
    assert install.prometheus_release("v0.310.2") == "3.10.2"
    with pytest.raises(ValueError, match=r"v0\.MMmm\.p"):
        install.prometheus_release("v3.5.0")


def test_a_failing_go_build_names_the_module_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPYRE_SERVING_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GOTOOLCHAIN", "local")
    broken = go_module(tmp_path / "broken", "1.21", "package main\n\nfunc main() { x := 1 }\n")
    with pytest.raises(install_steps.InstallError) as err:
        install._go_build(broken, {"tiny": "."}, lambda _: None)
    assert "building example.test/tiny v1.2.3 (broken/go.mod): package example.test/tiny " in str(
        err.value
    )
    assert "does not compile: ./main.go:3:15: declared and not used: x" in str(err.value)
    future = go_module(tmp_path / "future", "1.999", "package main\n\nfunc main() {}\n")
    with pytest.raises(install_steps.InstallError, match=r"go.mod needs Go 1\.999, the go"):
        install._go_build(future, {"tiny": "."}, lambda _: None)
    assert not list((tmp_path / "cache" / "k8s").glob(".build-*"))  # no half-built leftovers


def test_a_module_the_proxy_refuses_is_named() -> None:
    build = install.kubernetes("current")
    output = [
        "go: downloading k8s.io/kube-scheduler v0.31.14",
        "\tk8s.io/kube-scheduler/extender/v1: k8s.io/kube-scheduler@v0.31.14: reading "
        "https://proxy.example/k8s.io/kube-scheduler/@v/v0.31.14.zip: 403 Forbidden",
    ]
    assert install.explain_go_failure(build, output) == (
        f"building k8s.io/kubernetes {build.version} (kubernetes/go.mod): module "
        "k8s.io/kube-scheduler@v0.31.14 could not be had: reading "
        "https://proxy.example/k8s.io/kube-scheduler/@v/v0.31.14.zip: 403 Forbidden"
    )


def test_the_releases_come_from_the_go_mods(monkeypatch: pytest.MonkeyPatch) -> None:
    assert install.kubernetes("current").module == "k8s.io/kubernetes"
    assert install.etcd().module == "go.etcd.io/etcd/server/v3"
    monkeypatch.setenv("SPYRE_KUBERNETES", "newest")
    with pytest.raises(BinariesMissing, match="SPYRE_KUBERNETES=newest is not a release"):
        find_binaries()


def fake_wheel(path: Path) -> Path:
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as z:
        z.writestr("kubectl/kubectl", b"KUBECTL")
        z.writestr("helm/helm", b"HELM")
    bundle = io.BytesIO()
    with tarfile.open(fileobj=bundle, mode="w:gz") as tgz:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        tgz.addfile(info, io.BytesIO(layer.getvalue()))
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("aws_cdk/x/_jsii/layer@2.0.0.jsii.tgz", bundle.getvalue())
    return path


def test_tools_are_unpacked_executable(tmp_path: Path) -> None:
    target = tmp_path / "bin"
    target.mkdir()
    tools._extract(fake_wheel(tmp_path / "x.whl"), target)
    for name, content in (("kubectl", b"KUBECTL"), ("helm", b"HELM")):
        assert (target / name).read_bytes() == content
        assert os.access(target / name, os.X_OK)
    assert sorted(p.name for p in target.iterdir()) == ["helm", "kubectl"]


def test_tool_override_and_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPYRE_SERVING_CACHE", str(tmp_path))
    monkeypatch.delenv("SPYRE_HELM", raising=False)
    with pytest.raises(tools.ToolMissing, match="spyre-operator cluster install"):
        tools.tool("helm")
    monkeypatch.setenv("SPYRE_HELM", "/opt/helm")
    assert tools.tool("helm") == "/opt/helm"
