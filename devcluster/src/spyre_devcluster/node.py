"""`cluster up --node`: the local control plane plus a real node that runs pods.

On top of the plane (with the flags and controllers a kubelet needs), `up` starts
kube-scheduler, a private image registry (spyre_devcluster/registry.py), containerd, the kubelet,
kube-proxy and a hostPath volume provisioner,
all recorded in the plane's state so `down` stops exactly them: all of them built from
Go modules by `cluster install --node` (binaries.node_builds). Files live in DIR/node,
except containerd's root: it is kept in the cache folder, keyed by containerd's version,
so images imported once survive `down` and the next `up`.

One node per machine: kube-proxy's iptables chains and the kubelet's cgroups have fixed
names. The folder of the running node is recorded in /run/spyre-node/folder.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spyre_devcluster import host, node_config, preflight, registry
from spyre_devcluster.binaries import (
    CONTAINERD,
    KUBELET,
    PROXY,
    SCHEDULER,
    SHIM,
    NodeBinaries,
    cache_root,
    containerd,
    ctr_binary,
    node_binaries,
)
from spyre_devcluster.controlplane import (
    SERVICE_CIDR,
    ControlPlane,
    ControlPlaneError,
    Process,
    Profile,
    State,
    free_port,
    tail,
)
from spyre_devcluster.images import recipes
from spyre_devcluster.images.containerd import Ctr, import_image
from spyre_devcluster.images.store import Image
from spyre_devcluster.kubeapi import Api, ApiError
from spyre_devcluster.node_config import (
    BRIDGE,
    CARD_RESOURCES,
    DEVICE_PLUGIN_DIR,
    NODE_IP,
    NODE_NAME,
    RUN_DIR,
    SOCKET_PATH_MAX,
    Layout,
    front_proxy_args,
    pki_commands,
)

MACHINE_RECORD = RUN_DIR / "folder"
NODE_STATE = "node.json"
READY_TIMEOUT = 120.0
DEVICE_PLUGIN = "deviceplugin"
# stopped before containers are removed
NODE_PROCESSES = ("provisioner", DEVICE_PLUGIN, PROXY, KUBELET)


class NodeError(ControlPlaneError):
    """The node cannot start (or stop), with what to do about it."""


@dataclass(frozen=True)
class NodeStatus:
    name: str
    ready: bool
    containerd: Path
    image_store: Path


def image_store() -> Path:
    """containerd's root in the cache: images imported once stay for the next `up`
    (keyed by the version gomod/containerd/go.mod builds: a new one starts a new store)."""
    return cache_root() / "node" / f"containerd-{containerd().version}"


def _run(cmd: list[str], what: str) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise NodeError(f"{what} failed (`{' '.join(cmd)}`): {out.stderr.strip()}")
    return out.stdout


class Node:
    """A node (and its control plane) rooted at a folder."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory.resolve()
        self.layout = Layout(self.dir / "node", image_store())
        self.state_file = self.dir / NODE_STATE
        self.tokens = {
            "kubelet": secrets.token_hex(16),
            "proxy": secrets.token_hex(16),
        }
        self.plane = ControlPlane(self.dir, self._profile())

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    def _profile(self) -> Profile:
        pki = self.layout.pki
        return Profile(
            address=NODE_IP,
            authorization="Node,RBAC",
            controllers="*",
            apiserver_args=(
                f"--advertise-address={NODE_IP}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                "--enable-admission-plugins=NodeRestriction",
                *front_proxy_args(pki),
            ),
            controller_args=(
                f"--service-account-private-key-file={self.dir / 'run' / 'sa.key'}",
                f"--root-ca-file={self.dir / 'run' / 'certs' / 'apiserver.crt'}",
                f"--flex-volume-plugin-dir={self.layout.dir / 'flexvolume'}",
            ),
            tokens=(
                f'{self.tokens["kubelet"]},system:node:{NODE_NAME},kubelet,"system:nodes"',
                f"{self.tokens['proxy']},system:kube-proxy,kube-proxy",
            ),
        )

    # ----- status ------------------------------------------------------------------
    def is_node(self) -> bool:
        return self.state_file.exists()

    def status(self) -> NodeStatus | None:
        if not self.is_node() or self.plane.running() is None:
            return None
        ready = False
        with contextlib.suppress(ApiError, OSError):
            ready = self._ready(Api.from_kubeconfig(self.kubeconfig))
        return NodeStatus(NODE_NAME, ready, self.layout.containerd_socket, image_store())

    # ----- up ----------------------------------------------------------------------
    def up(
        self,
        log: Callable[[str], None] = lambda _: None,
        etcd_port: int | None = None,
        apiserver_port: int | None = None,
        cards: dict[str, int] | None = None,
    ) -> State:
        """`cards`: fake Spyre cards per resource (ibm.com/spyre_pf: 8), advertised by
        the node's device plugin (spyre_devcluster/deviceplugin.py); none without."""
        found = preflight.problems()
        if found:
            raise NodeError(preflight.report(found))
        longest = len(str(self.layout.kubelet_socket))
        if longest > SOCKET_PATH_MAX:
            raise NodeError(
                f"the folder {self.dir} is too long for the kubelet's unix sockets "
                f"({longest} > {SOCKET_PATH_MAX} characters): use a shorter --dir"
            )
        self._claim_machine()
        try:
            counted = {name: n for name, n in (cards or {}).items() if n}
            return self._up(log, etcd_port, apiserver_port, counted)
        except BaseException:
            self.down()
            raise

    def _claim_machine(self) -> None:
        if MACHINE_RECORD.exists():
            other = Path(MACHINE_RECORD.read_text().strip())
            if ControlPlane(other).running() is not None:
                raise NodeError(
                    f"a node already runs on this machine, from {other} (one node per "
                    "machine: kube-proxy's iptables chains and the kubelet's cgroups have "
                    f"fixed names); use it, or stop it with "
                    f"`spyre-operator cluster down --dir {other}`"
                )
            stale = Node(other)  # a node that was not shut down cleanly
            stale.down()
            stale.clean_host()  # also when its folder is gone
        chains = host.all_our_chains()
        if chains:
            raise NodeError(
                f"iptables already has KUBE-/CNI-/SPYRE- chains ({', '.join(chains)}): "
                "another kube-proxy, CNI network or node runs on this machine; stop it first"
            )
        if host.pod_cgroups():
            raise NodeError(
                f"cgroups named {host.POD_CGROUP} exist under {host.CGROUP_ROOT}: another "
                "kubelet runs (or ran) on this machine; stop it first"
            )
        if self.plane.running() is not None:
            raise NodeError(
                f"a control plane already runs from {self.dir}; stop it with "
                f"`spyre-operator cluster down --dir {self.dir}`"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        # recorded before anything changes, so `down` can put it back whatever happens
        saved = {
            "sysctls": host.read_sysctls(),
            "absent_paths": host.absent_fixed_paths(),
            "lo_address": not host.lo_has(NODE_IP),
        }
        self.state_file.write_text(json.dumps(saved, indent=2))
        RUN_DIR.mkdir(mode=0o700, exist_ok=True)
        MACHINE_RECORD.write_text(str(self.dir))

    def _up(
        self,
        log: Callable[[str], None],
        etcd_port: int | None,
        apiserver_port: int | None,
        cards: dict[str, int],
    ) -> State:
        found = node_binaries()
        bins = found.programs
        started = time.monotonic()

        def step(message: str) -> None:
            log(f"[{time.monotonic() - started:5.1f}s] {message}")

        for folder in (self.layout.dir, self.layout.pki, self.layout.cni / "net.d"):
            folder.mkdir(parents=True, exist_ok=True)
        self._write_pki()
        if not host.lo_has(NODE_IP):
            host.add_lo_address(NODE_IP)
        host.reject_unrouted(SERVICE_CIDR)
        step("control plane")
        state = self.plane.up(
            binaries=found.plane, etcd_port=etcd_port, apiserver_port=apiserver_port
        )
        api = Api(state.server, state.token)
        ca = self.dir / "run" / "certs" / "apiserver.crt"
        for user, name in (
            (self.tokens["kubelet"], "kubelet"),
            (self.tokens["proxy"], "kube-proxy"),
        ):
            config = node_config.kubeconfig(state.server, ca, name, user)
            self._write_json(f"{name}.kubeconfig", config)
        step("scheduler")
        self.plane.spawn(
            state,
            SCHEDULER,
            bins[SCHEDULER],
            [
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
        )
        step("registry")
        self._start_registry(state)
        step("containerd")
        self._start_containerd(state, found)
        step("pause image")
        self._import_pause()
        step("kubelet")
        self._write_json("cni/net.d/10-spyre.conflist", node_config.cni_conflist(self.layout))
        port, healthz = free_port(), free_port()
        self._write_json("kubelet.json", node_config.kubelet_config(self.layout, port, healthz))
        kubelet = self.plane.spawn(
            state, KUBELET, bins[KUBELET], node_config.kubelet_args(self.layout)
        )
        self.plane.wait_ready(kubelet, "kubelet", f"http://127.0.0.1:{healthz}/healthz")
        step("kube-proxy")
        healthz, metrics = free_port(), free_port()
        self._write_json("kube-proxy.json", node_config.proxy_config(self.layout, healthz, metrics))
        proxy = self.plane.spawn(
            state, PROXY, bins[PROXY], [f"--config={self.layout.file('kube-proxy.json')}"]
        )
        self.plane.wait_ready(proxy, "kube-proxy", f"http://127.0.0.1:{healthz}/healthz")
        step("storage")
        api.create("/apis/storage.k8s.io/v1/storageclasses", node_config.storage_class())
        self.plane.spawn(
            state,
            "provisioner",
            Path(sys.executable),
            [
                "-m",
                "spyre_devcluster.provisioner",
                f"--kubeconfig={self.kubeconfig}",
                f"--root={self.layout.volumes}",
            ],
        )
        if cards:
            step("cards")
            args = [f"--resource={name}={count}" for name, count in cards.items()]
            plugin = self.plane.spawn(
                state,
                DEVICE_PLUGIN,
                Path(sys.executable),
                ["-m", "spyre_devcluster.deviceplugin", f"--dir={DEVICE_PLUGIN_DIR}", *args],
            )
        step("node Ready")
        self._until("the node to be Ready", lambda: self._ready(api), state, kubelet.log)
        if cards:
            self._until(
                f"the node to show its cards ({cards})",
                lambda: self.allocatable_cards(api) == cards,
                state,
                plugin.log,
            )
        self._until(
            # a pod's projected service-account token needs both (the controller manager's)
            "the default ServiceAccount and the kube-root-ca.crt ConfigMap",
            lambda: bool(
                api.get("/api/v1/namespaces/default/serviceaccounts/default")
                and api.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
            ),
            state,
            self.dir / "run" / "kube-controller-manager.log",
        )
        self._check_alive(state)
        step("ready")
        return state

    def _write_json(self, name: str, doc: object) -> None:
        self.layout.file(name).write_text(json.dumps(doc, indent=2))

    def _write_pki(self) -> None:
        for cmd in pki_commands(self.layout.pki):
            _run(cmd, "making the node's certificates")

    @property
    def registry(self) -> registry.Registry:
        """The node's registry (started by `up`): its address, CA and account."""
        found = registry.Registry.load(self.layout.registry)
        if found is None:
            raise NodeError(f"no registry recorded in {self.layout.registry}: is the node up?")
        return found

    def _start_registry(self, state: State) -> None:
        """Before containerd, whose registry config names it; on NODE_IP, which the
        node's pods reach too (the cache registry's Jobs)."""
        reg, config = registry.configure(self.layout.registry, free_port(), host=NODE_IP)
        binary, *args = registry.command(config)
        proc = self.plane.spawn(state, "registry", Path(binary), args)
        self._until("the registry", lambda: registry.answers(reg), state, proc.log)
        registry.write_containerd_hosts(reg, self.layout.registry_hosts)

    def _start_containerd(self, state: State, found: NodeBinaries) -> None:
        self.layout.containerd_root.mkdir(parents=True, exist_ok=True)
        config = self.layout.file("containerd.toml")
        text = node_config.containerd_config(
            self.layout, recipes.PAUSE, found.programs[SHIM], found.cni_dir
        )
        config.write_text(text)
        proc = self.plane.spawn(
            state, CONTAINERD, found.programs[CONTAINERD], [f"--config={config}"]
        )
        self._until("containerd", self._containerd_answers, state, proc.log)
        self._remove_containers()  # left by a node that was killed

    def _import_pause(self) -> None:
        (pause,) = recipes.build_images(["pause"])  # cached after the first build
        self.import_image(pause)

    def ctr(self) -> Ctr:
        """A client of the node's containerd (ctr of the same build), in the CRI's namespace."""
        return Ctr(str(self.layout.containerd_socket), ctr=ctr_binary())

    def import_image(self, image: Image) -> None:
        import_image(image, str(self.layout.containerd_socket), ctr=ctr_binary())

    def _ctr(self, *args: str) -> list[str]:
        return self.ctr().cmd(*args)

    def _containerd_answers(self) -> bool:
        return subprocess.run(self._ctr("version"), capture_output=True).returncode == 0

    def _remove_containers(self) -> None:
        ids = subprocess.run(self._ctr("containers", "ls", "-q"), capture_output=True, text=True)
        for cid in ids.stdout.split():
            subprocess.run(self._ctr("tasks", "kill", "-s", "SIGKILL", cid), capture_output=True)
            subprocess.run(self._ctr("tasks", "delete", "-f", cid), capture_output=True)
            subprocess.run(self._ctr("containers", "delete", cid), capture_output=True)

    def restart_kubelet(self) -> None:
        """Stop the kubelet and start it again with the same settings (as an upgrade or
        a crash would); the pods keep running under containerd."""
        state = self.plane.load_state()
        if state is None:
            raise NodeError(f"no node runs from {self.dir}")
        (old,) = [p for p in state.processes if p.name == KUBELET]
        self.plane.stop(old)
        state.processes.remove(old)
        kubelet = node_binaries().programs[KUBELET]
        self.plane.spawn(state, KUBELET, kubelet, node_config.kubelet_args(self.layout))

    @staticmethod
    def allocatable_cards(api: Api) -> dict[str, int]:
        """The node's allocatable Spyre cards, per resource that has any."""
        node = api.get(f"/api/v1/nodes/{NODE_NAME}")
        allocatable = node.get("status", {}).get("allocatable", {})
        found = {name: int(allocatable.get(name, "0")) for name in CARD_RESOURCES}
        return {name: count for name, count in found.items() if count}

    @staticmethod
    def _ready(api: Api) -> bool:
        try:
            node = api.get(f"/api/v1/nodes/{NODE_NAME}")
        except ApiError:
            return False
        conditions = node.get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        taints = node.get("spec", {}).get("taints", [])
        return ready and not taints

    def _until(self, what: str, check: Callable[[], bool], state: State, log: str | Path) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            self._check_alive(state)
            try:
                if check():
                    return
            except (ApiError, OSError):
                pass
            time.sleep(0.2)
        raise NodeError(f"timed out after {READY_TIMEOUT:.0f}s waiting for {what}; see {log}")

    def _check_alive(self, state: State) -> None:
        for proc in state.processes:
            code = self.plane.exit_code(proc)
            if code is not None:
                raise NodeError(
                    f"{proc.name} exited during start-up (exit code {code}); last lines of "
                    f"{proc.log}:\n    {tail(proc.log)}"
                )

    # ----- down --------------------------------------------------------------------
    def down(self) -> list[Process]:
        """Stop everything and put the host back as `up` found it."""
        state = self.plane.load_state()
        procs = state.processes if state else []
        ours = self._owns_machine()  # never touch the containerd or host of another node
        stopped = [p for p in procs if p.name in NODE_PROCESSES and self.plane.stop(p)]
        containerd = [p for p in procs if p.name == CONTAINERD]
        if ours and containerd and self._containerd_answers():
            self._remove_containers()
        stopped += [p for p in containerd if self.plane.stop(p)]
        if ours and self.is_node():
            self.clean_host()
        stopped += self.plane.down()
        if self.is_node():
            self._restore_host(ours)
        return stopped

    def _owns_machine(self) -> bool:
        if not MACHINE_RECORD.exists():
            return True
        return MACHINE_RECORD.read_text().strip() == str(self.dir)

    def clean_host(self) -> None:
        """Remove what the node's components leave on the host (idempotent)."""
        for pid in host.pids_with_cmdline("containerd-shim", str(self.layout.containerd_socket)):
            host.kill(pid)
        host.kill_pod_processes()
        host.unmount_under([self.dir, self.layout.containerd_root])
        host.remove_pod_cgroups()
        host.remove_chains()
        host.delete_link(BRIDGE)

    def _restore_host(self, ours: bool) -> None:
        host.remove_paths([str(self.layout.dir)])
        if ours:
            saved = json.loads(self.state_file.read_text())
            if saved["lo_address"]:
                host.delete_lo_address(NODE_IP)
            host.restore_sysctls(saved["sysctls"])
            host.remove_paths([*saved["absent_paths"], str(RUN_DIR)])
            self._forget_cri_objects()
        self.state_file.unlink()

    def _forget_cri_objects(self) -> None:
        """The CRI plugin's per-sandbox/container folders in the kept root: their
        containers are gone, only the images stay."""
        cri = self.layout.containerd_root / "io.containerd.grpc.v1.cri"
        host.remove_paths([str(cri / "sandboxes"), str(cri / "containers")])
