"""`spyre-operator cluster up/down` as a user runs it, including the ways it can go wrong."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spyre_devcluster import controlplane
from spyre_devcluster.binaries import find_binaries
from spyre_devcluster.tools import tool

pytestmark = pytest.mark.integration


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spyre_operator", "cluster", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it runs nothing
    return Path(f"/proc/{pid}/exe").exists()


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "x"
    yield directory
    cli("down", "--dir", str(directory))  # never leave processes behind, even on failure


def test_up_kubectl_down_leaves_nothing_behind(cluster_dir: Path) -> None:
    up = cli("up", "--dir", str(cluster_dir))
    assert up.returncode == 0, up.stderr
    kubeconfig = cluster_dir / "kubeconfig"
    assert str(kubeconfig) in up.stdout

    namespaces = subprocess.run(
        [tool("kubectl"), "--kubeconfig", str(kubeconfig), "get", "ns", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "namespace/default" in namespaces.stdout.split()
    assert "namespace/kube-system" in namespaces.stdout.split()

    state = json.loads((cluster_dir / "state.json").read_text())
    pids = [p["pid"] for p in state["processes"]]
    assert {p["name"] for p in state["processes"]} == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
    }

    again = cli("up", "--dir", str(cluster_dir))
    assert again.returncode == 1
    assert "already running" in again.stderr
    assert "cluster down" in again.stderr
    assert json.loads((cluster_dir / "state.json").read_text())["processes"] == state["processes"]

    down = cli("down", "--dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    assert not any(pid_alive(pid) for pid in pids)
    assert not port_open(state["apiserver_port"])
    assert not port_open(state["etcd_port"])
    assert not (cluster_dir / "state.json").exists()
    assert not (cluster_dir / "kubeconfig").exists()
    assert cli("status", "--dir", str(cluster_dir)).returncode == 3


def test_missing_binaries_say_what_to_do(tmp_path: Path, cluster_dir: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with_assets = cli("up", "--dir", str(cluster_dir), env={"KUBEBUILDER_ASSETS": str(empty)})
    assert with_assets.returncode == 1
    assert f"KUBEBUILDER_ASSETS={empty}" in with_assets.stderr
    assert "Traceback" not in with_assets.stderr

    env = {k: v for k, v in os.environ.items() if k != "KUBEBUILDER_ASSETS"}
    env["SPYRE_SERVING_CACHE"] = str(empty)
    no_cache = subprocess.run(
        [sys.executable, "-m", "spyre_operator", "cluster", "up", "--dir", str(cluster_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert no_cache.returncode == 1
    assert "spyre-operator cluster install" in no_cache.stderr
    assert "Traceback" not in no_cache.stderr


def test_port_in_use_is_a_clear_error(cluster_dir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli("up", "--dir", str(cluster_dir), "--apiserver-port", str(port))
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "--apiserver-port" in result.stderr
    assert not (cluster_dir / "state.json").exists()


def test_etcd_dying_during_start_up_is_reported_with_its_log(
    tmp_path: Path, cluster_dir: Path
) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    fake_etcd = assets / "etcd"
    fake_etcd.write_text(
        "#!/bin/sh\necho 'etcdmain: cannot access data directory: disk full'\nexit 3\n"
    )
    fake_etcd.chmod(0o755)
    (assets / "kube-apiserver").symlink_to(find_binaries().apiserver)
    result = cli(
        "up",
        "--dir",
        str(cluster_dir),
        "--no-controller-manager",
        env={"KUBEBUILDER_ASSETS": str(assets)},
    )
    assert result.returncode == 1
    assert "etcd exited during start-up (exit code 3)" in result.stderr
    assert "disk full" in result.stderr
    assert not (cluster_dir / "state.json").exists()


def test_a_port_taken_after_it_was_chosen_is_chosen_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race of a busy machine, made certain: the first port chosen "free" is already
    # listened on by the time etcd binds it. The plane chooses again and comes up.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ports, choose = iter([taken]), controlplane.free_port
        monkeypatch.setattr(controlplane, "free_port", lambda: next(ports, None) or choose())
        plane = controlplane.ControlPlane(tmp_path / "race")
        try:
            state = plane.up(controller_manager=False)
            assert taken not in (state.etcd_port, state.apiserver_port)
            assert port_open(state.apiserver_port)
        finally:
            plane.down()
    assert not (tmp_path / "race" / "state.json").exists()


def test_sigterm_inside_the_context_manager_stops_the_plane(tmp_path: Path) -> None:
    # A test run killed with TERM (a CI timeout, `kill`) must not leave etcd and
    # kube-apiserver behind: the `with` block unwinds as on Ctrl-C.
    directory = tmp_path / "term"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from spyre_devcluster.controlplane import ControlPlane\n"
        "with ControlPlane(Path(sys.argv[1])):\n"
        "    print('up', flush=True)\n"
        "    time.sleep(600)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(directory)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "up\n"
        pids = [p["pid"] for p in json.loads((directory / "state.json").read_text())["processes"]]
        assert pids and all(pid_alive(pid) for pid in pids)
        holder.terminate()
        holder.wait(timeout=60)
        assert not [pid for pid in pids if pid_alive(pid)]
        assert not (directory / "state.json").exists()
    finally:
        holder.kill()
        controlplane.ControlPlane(directory).down()
