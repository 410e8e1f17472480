"""One node of the cluster: its containerd, kubelet, kube-proxy and card plugin, started
by `Node.up` for each node (a further node's inside the namespaces of node_netns.py), and
the node's containerd as the rest of the devcluster reaches it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from spyre_devcluster import host, node_config, node_netns
from spyre_devcluster.binaries import (
    CONTAINERD,
    KUBELET,
    PROXY,
    SHIM,
    NodeBinaries,
    cache_root,
    containerd,
    ctr_binary,
)
from spyre_devcluster.controlplane import ControlPlane, State, free_port
from spyre_devcluster.images import recipes
from spyre_devcluster.images.containerd import Ctr, import_image
from spyre_devcluster.images.store import Image
from spyre_devcluster.node_config import DEVICE_PLUGIN_DIR, FIRST, Layout, Member

DEVICE_PLUGIN = "deviceplugin"
NAMESPACES = "namespaces"  # a further node's holder of its namespaces (node_netns.py)

# what, check, log: wait for check, failing with the log if a process ends first
Until = Callable[[str, Callable[[], bool], str | Path], None]


def image_store(member: Member = FIRST) -> Path:
    """A node's containerd root in the cache: images imported once stay for the next `up`
    (keyed by the version gomod/containerd/go.mod builds: a new one starts a new store;
    and by the node: two containerds cannot share one)."""
    store = cache_root() / "node" / f"containerd-{containerd().version}"
    return store if member.first else store.with_name(f"{store.name}-{member.name}")


def start(
    plane: ControlPlane,
    state: State,
    layout: Layout,
    found: NodeBinaries,
    cards: dict[str, int],
    until: Until,
    step: Callable[[str], None],
) -> None:
    """The node's processes, recorded in the plane's state under Member.process names."""
    member, bins = layout.member, found.programs
    prefix: list[str] = []
    if not member.first:
        step(f"{member.name}: namespaces")
        node_netns.prepare(member)
        holder = plane.spawn(
            state, member.process(NAMESPACES), Path(sys.executable),
            node_netns.holder_args(layout),
        )  # fmt: skip
        until(
            f"{member.name}'s namespaces",
            lambda: node_netns.READY in Path(holder.log).read_text(),
            holder.log,
        )
        node_netns.link(member, holder.pid)
        prefix = node_netns.enter(holder.pid)
    step(f"{member.name}: containerd")
    _start_containerd(plane, state, found, layout, prefix, until)
    (pause,) = recipes.build_images(["pause"])  # cached after the first build
    import_into(pause, layout)
    step(f"{member.name}: kubelet")
    _write_json(layout, "cni/net.d/10-spyre.conflist", node_config.cni_conflist(layout))
    port, healthz = free_port(), free_port()
    _write_json(layout, "kubelet.json", node_config.kubelet_config(layout, port, healthz))
    kubelet = plane.spawn(
        state, member.process(KUBELET), bins[KUBELET], node_config.kubelet_args(layout), prefix
    )
    plane.wait_ready(kubelet, "kubelet", f"http://{member.ip}:{healthz}/healthz")
    step(f"{member.name}: kube-proxy")
    healthz, metrics = free_port(), free_port()
    _write_json(layout, "kube-proxy.json", node_config.proxy_config(layout, healthz, metrics))
    proxy = plane.spawn(
        state, member.process(PROXY), bins[PROXY],
        [f"--config={layout.file('kube-proxy.json')}"], prefix,
    )  # fmt: skip
    plane.wait_ready(proxy, "kube-proxy", f"http://{member.ip}:{healthz}/healthz")
    if cards:
        step(f"{member.name}: cards")
        args = [f"--resource={name}={count}" for name, count in cards.items()]
        plane.spawn(
            state, member.process(DEVICE_PLUGIN), Path(sys.executable),
            ["-m", "spyre_devcluster.deviceplugin", f"--dir={DEVICE_PLUGIN_DIR}", *args],
            prefix,
        )  # fmt: skip


def _write_json(layout: Layout, name: str, doc: object) -> None:
    layout.file(name).write_text(json.dumps(doc, indent=2))


def _start_containerd(
    plane: ControlPlane,
    state: State,
    found: NodeBinaries,
    layout: Layout,
    prefix: list[str],
    until: Until,
) -> None:
    layout.containerd_root.mkdir(parents=True, exist_ok=True)
    layout.member.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = layout.file("containerd.toml")
    text = node_config.containerd_config(layout, recipes.PAUSE, found.programs[SHIM], found.cni_dir)
    config.write_text(text)
    proc = plane.spawn(
        state, layout.member.process(CONTAINERD), found.programs[CONTAINERD],
        [f"--config={config}"], prefix,
    )  # fmt: skip
    until(f"{layout.member.name}'s containerd", lambda: containerd_answers(layout), proc.log)
    remove_containers(layout)  # left by a node that was killed


def ctr(layout: Layout) -> Ctr:
    """A client of the node's containerd (ctr of the same build), in the CRI's namespace."""
    return Ctr(str(layout.containerd_socket), ctr=ctr_binary())


def import_into(image: Image, layout: Layout) -> None:
    """A further node's store gets the layers hard-linked from the images cache (the
    serving image costs it no disk); the first node's are sent as before."""
    socket, further = str(layout.containerd_socket), not layout.member.first
    import_image(image, socket, ctr=ctr_binary(), link=further)


def containerd_answers(layout: Layout) -> bool:
    return subprocess.run(ctr(layout).cmd("version"), capture_output=True).returncode == 0


def remove_containers(layout: Layout) -> None:
    cmd = ctr(layout).cmd
    ids = subprocess.run(cmd("containers", "ls", "-q"), capture_output=True, text=True)
    for cid in ids.stdout.split():
        subprocess.run(cmd("tasks", "kill", "-s", "SIGKILL", cid), capture_output=True)
        subprocess.run(cmd("tasks", "delete", "-f", cid), capture_output=True)
        subprocess.run(cmd("containers", "delete", cid), capture_output=True)


def forget_cri_objects(layout: Layout) -> None:
    """The CRI plugin's per-sandbox/container folders in the kept root: their
    containers are gone, only the images stay."""
    cri = layout.containerd_root / "io.containerd.grpc.v1.cri"
    host.remove_paths([str(cri / "sandboxes"), str(cri / "containers")])
