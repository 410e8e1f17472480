"""CephFS on the node: the network filesystem behind its ReadWriteMany class.

Clusters give shared volumes a network filesystem (OpenShift Data Foundation: CephFS);
this machine's kernel has no NFS and no ceph module, but FUSE is built in, so the node
runs a one-OSD Ceph from Debian (monitor, manager, OSD with BlueStore on a sparse file,
metadata server) and mounts it with ceph-fuse, the userspace client: its caching (the
metadata server's capabilities), its rename, its behaviour when the server goes away
(I/O waits, as on a hard-mounted NFS) are Ceph's own. The provisioner hands out folders
of that mount as the class's volumes (provisioner.py).

Everything lives in one folder (data, sockets, logs: `run_dir`, `admin_socket` and the
rest point there), so `down` leaves nothing on the host. The mount is per node: another
node mounts the same filesystem with `mount_args` at its own mount point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from spyre_devcluster.controlplane import ControlPlane, ControlPlaneError, State, free_port
from spyre_devcluster.kubeapi import Api
from spyre_devcluster.node_config import Layout

CLASS = "spyre-cephfs"
PROVISIONER = "spyre.dev/cephfs"
PACKAGES = ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds", "ceph-fuse")  # Debian's
# the daemons `down`/`stop_server` stop and `start_server` starts again (the monitor
# and manager stay: a metadata server and an OSD down is CephFS's file server down)
SERVER = ("ceph-osd", "ceph-mds")
BLOCK_BYTES = 8 << 30  # sparse: only what is written takes disk
CACHE_BYTES = 64 << 20  # BlueStore's cache: the default (GBs) is for real disks
FS_NAME = "spyre"
COMMAND_TIMEOUT = 30


class CephError(ControlPlaneError):
    """A Ceph step failed, with its command and output."""


def config(folder: Path, fsid: str, address: str, port: int) -> str:
    """ceph.conf: every path in `folder`, no authentication (one machine), one replica."""
    settings = {
        "fsid": fsid,
        "mon_host": f"[v2:{address}:{port}]",
        "public_addr": address,
        "auth_cluster_required": "none",
        "auth_service_required": "none",
        "auth_client_required": "none",
        "keyring": "/dev/null",
        "run_dir": f"{folder}/run",
        "admin_socket": f"{folder}/run/$name.asok",
        "log_file": f"{folder}/log/$name.log",
        "pid_file": "",
        "mon_data": f"{folder}/mon-$id",
        "mgr_data": f"{folder}/mgr-$id",
        "osd_data": f"{folder}/osd-$id",
        "mds_data": f"{folder}/mds-$id",
        "osd_objectstore": "bluestore",
        "bluestore_block_create": "true",
        "bluestore_block_size": str(BLOCK_BYTES),
        "bluestore_cache_autotune": "false",
        "bluestore_cache_size": str(CACHE_BYTES),
        "osd_pool_default_size": "1",
        "osd_pool_default_min_size": "1",
        "osd_pool_default_pg_autoscale_mode": "off",
        "mon_allow_pool_size_one": "true",
        "mon_warn_on_pool_no_redundancy": "false",
        "osd_crush_chooseleaf_type": "0",
        # the monitor stops below 5% free by default: the machine's disk is shared
        "mon_data_avail_crit": "0",
        "mon_data_avail_warn": "1",
    }
    return "[global]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())


@dataclass(frozen=True)
class Ceph:
    """A one-machine Ceph rooted at `dir`; `spawn` starts a recorded daemon (the node's
    control plane records it, so `down` stops it)."""

    dir: Path

    @property
    def conf(self) -> Path:
        return self.dir / "ceph.conf"

    def daemon(self, kind: str) -> list[str]:
        """The argv of a daemon (ceph-mon, ceph-mgr, ceph-osd, ceph-mds), in the
        foreground."""
        return ["-f", "-c", str(self.conf), "-i", "0" if kind == "ceph-osd" else "a"]

    def mount_args(self, mount_point: Path) -> list[str]:
        """ceph-fuse's argv (foreground) mounting the filesystem at mount_point."""
        return ["-f", "-c", str(self.conf), str(mount_point)]

    def ceph(self, *args: str) -> str:
        return self._run(["ceph", "-c", str(self.conf), *args], " ".join(args[:2]))

    def _run(self, cmd: list[str], what: str) -> str:
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise CephError(f"`{' '.join(cmd)}` did not answer in {COMMAND_TIMEOUT}s") from exc
        if done.returncode != 0:
            raise CephError(f"ceph {what} failed (`{' '.join(cmd)}`): {done.stderr.strip()}")
        return done.stdout

    def create(self, address: str, port: int) -> None:
        """The configuration and the monitor's store (before any daemon runs)."""
        for sub in ("run", "log", "mon-a", "mgr-a", "osd-0", "mds-a"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        fsid = str(uuid.uuid4())
        self.conf.write_text(config(self.dir, fsid, address, port))
        monmap = self.dir / "monmap"
        self._run(
            ["monmaptool", "--create", "--fsid", fsid, "--addv", "a",
             f"[v2:{address}:{port}]", str(monmap)],
            "monmap",
        )  # fmt: skip
        self._run(["ceph-mon", "--mkfs", *self.daemon("ceph-mon"), "--monmap", str(monmap)], "mkfs")

    def make_osd(self) -> None:
        """Register the OSD with the monitor and format its BlueStore (monitor running)."""
        osd_uuid = str(uuid.uuid4())
        self.ceph("osd", "new", osd_uuid)
        self._run(["ceph-osd", "--mkfs", *self.daemon("ceph-osd"), "--osd-uuid", osd_uuid], "mkfs")

    def make_fs(self) -> None:
        """The filesystem's two pools and the filesystem (OSD up)."""
        for pool in ("metadata", "data"):
            self.ceph("osd", "pool", "create", f"{FS_NAME}-{pool}", "8")
        self.ceph("fs", "new", FS_NAME, f"{FS_NAME}-metadata", f"{FS_NAME}-data")

    def said(self, *args: str) -> str:
        """The command's output, "" while the cluster cannot answer (starting up)."""
        try:
            return self.ceph(*args)
        except CephError:
            return ""

    def osd_up(self) -> bool:
        return bool(json.loads(self.said("osd", "stat", "-f", "json") or "{}").get("num_up_osds"))

    def mds_active(self) -> bool:
        return "up:active" in self.said("mds", "stat")


def mounted_with_space(mount_point: Path) -> bool:
    """The mount answers statfs with space: the manager reports the pools' use, and a
    filesystem that says 0 bytes free would fail every compile's space check."""
    if not os.path.ismount(mount_point):
        return False
    found = os.statvfs(mount_point)
    return found.f_bavail * found.f_frsize > 0


Until = Callable[[str, Callable[[], bool], State, Path], None]


class OnNode:
    """The CephFS of a node: its daemons are the node's recorded processes (`down`
    unmounts it with the node's other mounts, then stops them)."""

    def __init__(self, plane: ControlPlane, layout: Layout, until: Until) -> None:
        self.plane, self.until = plane, until
        self.ceph, self.mount = Ceph(layout.ceph), layout.cephfs_mount

    def _spawn(self, state: State, kind: str, args: list[str]) -> None:
        binary = shutil.which(kind)
        if binary is None:
            raise CephError(f"{kind} not found: run `spyre-operator cluster install --node`")
        self.plane.spawn(state, kind, Path(binary), args)

    def _wait(self, state: State, what: str, check: Callable[[], bool], name: str) -> None:
        self.until(what, check, state, self.ceph.dir / "log" / f"{name}.log")

    def start(self, state: State, api: Api, address: str) -> str:
        """Create, start and mount the filesystem, each step waiting for the one before;
        its StorageClass. Returns the provisioner's --class (CLASS=mount point)."""
        self.ceph.create(address, free_port())
        for kind in ("ceph-mon", "ceph-mgr"):
            self._spawn(state, kind, self.ceph.daemon(kind))
        self._wait(state, "the Ceph monitor", lambda: bool(self.ceph.said("mon", "stat")), "mon.a")
        self.ceph.make_osd()
        self.server(state, running=True, first=True)
        self.mount.mkdir()
        self._spawn(state, "ceph-fuse", self.ceph.mount_args(self.mount))
        mounted = partial(mounted_with_space, self.mount)
        self._wait(state, "the CephFS mount to report its space", mounted, "client.admin")
        api.create("/apis/storage.k8s.io/v1/storageclasses", storage_class())
        return f"{CLASS}={self.mount}"

    def server(self, state: State | None = None, running: bool = True, first: bool = False) -> None:
        """Start the OSD and the metadata server (again), waiting until CephFS serves; or
        stop them (`running=False`), as an outage would: the mounts stay, their I/O waits."""
        state = state or self.plane.load_state()
        if state is None:
            raise CephError(f"no node runs from {self.plane.dir}")
        if not running:
            self.plane.stop_named(state, SERVER)
            return
        self._spawn(state, "ceph-osd", self.ceph.daemon("ceph-osd"))
        self._wait(state, "the Ceph OSD to be up", self.ceph.osd_up, "osd.0")
        if first:
            self.ceph.make_fs()
        self._spawn(state, "ceph-mds", self.ceph.daemon("ceph-mds"))
        self._wait(state, "the CephFS metadata server", self.ceph.mds_active, "mds.a")


def storage_class() -> dict[str, object]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": CLASS},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }
