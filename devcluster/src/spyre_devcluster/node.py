"""`cluster up --node [--nodes N]`: the local control plane plus real nodes that run pods.

On top of the plane (with the flags and controllers a kubelet needs), `up` starts
kube-scheduler, a private image registry (spyre_devcluster/registry.py), a volume
provisioner, asked for, a CephFS (spyre_devcluster/cephfs.py) and, for each node,
containerd, the kubelet, kube-proxy (and the card plugin), all recorded in the plane's
state so `down` stops exactly them: `cluster install --node` builds the Kubernetes parts
from Go modules (binaries.node_builds) and installs Ceph from Debian. Files live in
DIR/node, except containerd's roots: they are kept in the cache folder, keyed by
containerd's version (and the node), so images imported once survive `down` and the next
`up`. The first node runs in the host's namespaces; each further one in its own
(spyre_devcluster/node_netns.py).

One cluster per machine: the first node's kube-proxy chains and the kubelet's cgroups
have fixed names. The folder of the running cluster is recorded in /run/spyre-node/folder.
"""

from __future__ import annotations

import contextlib
import functools
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spyre_devcluster import cephfs, host, node_config, node_member, node_netns, preflight, registry
from spyre_devcluster.binaries import CONTAINERD, KUBELET, PROXY, SCHEDULER, node_binaries
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
from spyre_devcluster.images.containerd import Ctr
from spyre_devcluster.images.store import Image
from spyre_devcluster.kubeapi import Api, ApiError
from spyre_devcluster.node_config import (
    CARD_RESOURCES,
    FIRST,
    MAX_NODES,
    NODE_IP,
    RUN_DIR,
    SOCKET_PATH_MAX,
    Layout,
    Member,
    front_proxy_args,
    pki_commands,
)
from spyre_devcluster.node_member import DEVICE_PLUGIN, NAMESPACES, image_store

MACHINE_RECORD = RUN_DIR / "folder"
NODE_STATE = "node.json"
READY_TIMEOUT = 120.0
# stopped before containers are removed (each node's, Member.process)
NODE_PROCESSES = ("provisioner", DEVICE_PLUGIN, PROXY, KUBELET)
# every further node a cluster may have: a stale one is cleaned whatever its size was
FURTHER = [Member(i) for i in range(1, MAX_NODES)]


class NodeError(ControlPlaneError):
    """The node cannot start (or stop), with what to do about it."""


@dataclass(frozen=True)
class NodeStatus:
    name: str
    ready: bool
    containerd: Path
    image_store: Path


def _run(cmd: list[str], what: str) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise NodeError(f"{what} failed (`{' '.join(cmd)}`): {out.stderr.strip()}")
    return out.stdout


class Node:
    """The nodes (and their control plane) rooted at a folder: `nodes` of them (default:
    as many as the running cluster there has, else one)."""

    def __init__(self, directory: Path, nodes: int | None = None) -> None:
        self.dir = directory.resolve()
        self.state_file = self.dir / NODE_STATE
        self.members = [Member(i) for i in range(nodes or self._recorded_nodes())]
        self.layouts = [Layout(self.dir / "node", image_store(m), m) for m in self.members]
        self.layout = self.layouts[0]  # the first node's
        self.tokens = {m.name: secrets.token_hex(16) for m in self.members}
        self.tokens["proxy"] = secrets.token_hex(16)
        self.plane = ControlPlane(self.dir, self._profile())

    def _recorded_nodes(self) -> int:
        try:
            return int(json.loads(self.state_file.read_text()).get("nodes", 1))
        except (OSError, ValueError):
            return 1

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
                *(
                    f'{self.tokens[m.name]},system:node:{m.name},{m.name},"system:nodes"'
                    for m in self.members
                ),
                f"{self.tokens['proxy']},system:kube-proxy,kube-proxy",
            ),
        )

    # ----- status ------------------------------------------------------------------
    def is_node(self) -> bool:
        return self.state_file.exists()

    def statuses(self) -> list[NodeStatus]:
        """Each node's, when the cluster runs."""
        if not self.is_node() or self.plane.running() is None:
            return []
        api = Api.from_kubeconfig(self.kubeconfig)
        found = []
        for layout in self.layouts:
            ready = False
            with contextlib.suppress(ApiError, OSError):
                ready = self._ready(api, layout.member.name)
            name, socket = layout.member.name, layout.containerd_socket
            found.append(NodeStatus(name, ready, socket, layout.containerd_root))
        return found

    def status(self) -> NodeStatus | None:
        """The first node's, when the cluster runs."""
        return next(iter(self.statuses()), None)

    # ----- up ----------------------------------------------------------------------
    def up(
        self,
        log: Callable[[str], None] = lambda _: None,
        etcd_port: int | None = None,
        apiserver_port: int | None = None,
        cards: dict[str, int] | None = None,
        network_storage: bool = False,
    ) -> State:
        """`cards`: fake Spyre cards per resource (ibm.com/spyre_pf: 8) on each node,
        advertised by its device plugin (spyre_devcluster/deviceplugin.py); none without.
        `network_storage`: a CephFS and its class spyre-cephfs (cephfs.py)."""
        found = preflight.problems()
        if found:
            raise NodeError(preflight.report(found))
        if not 1 <= len(self.members) <= MAX_NODES:
            raise NodeError(f"--nodes {len(self.members)}: a cluster has 1 to {MAX_NODES} nodes")
        longest = max(len(str(layout.kubelet_socket)) for layout in self.layouts)
        if longest > SOCKET_PATH_MAX:
            raise NodeError(
                f"the folder {self.dir} is too long for the kubelet's unix sockets "
                f"({longest} > {SOCKET_PATH_MAX} characters): use a shorter --dir"
            )
        self._claim_machine()
        try:
            counted = {name: n for name, n in (cards or {}).items() if n}
            return self._up(log, etcd_port, apiserver_port, counted, network_storage)
        except BaseException:
            self.down()
            raise

    def _claim_machine(self) -> None:
        if MACHINE_RECORD.exists():
            other = Path(MACHINE_RECORD.read_text().strip())
            if ControlPlane(other).running() is not None:
                raise NodeError(
                    f"a node already runs on this machine, from {other} (one cluster per "
                    "machine: the first node's iptables chains and cgroups have fixed "
                    f"names); use it, or stop it with "
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
        if host.pod_cgroups(m.cgroup_root for m in [FIRST, *FURTHER]):
            raise NodeError(
                f"cgroups named {host.POD_CGROUP} exist under {host.CGROUP_ROOT}: another "
                "kubelet runs (or ran) on this machine; stop it first"
            )
        if host.link_exists(node_config.NODES_BRIDGE):
            raise NodeError(
                f"the link {node_config.NODES_BRIDGE} exists: another cluster's nodes run on "
                f"this machine; stop them first (or `ip link delete {node_config.NODES_BRIDGE}`)"
            )
        if self.plane.running() is not None:
            raise NodeError(
                f"a control plane already runs from {self.dir}; stop it with "
                f"`spyre-operator cluster down --dir {self.dir}`"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        # recorded before anything changes, so `down` can put it back whatever happens
        saved = {
            "nodes": len(self.members),
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
        network_storage: bool,
    ) -> State:
        found = node_binaries()
        bins = found.programs
        started = time.monotonic()

        def step(message: str) -> None:
            log(f"[{time.monotonic() - started:5.1f}s] {message}")

        for layout in self.layouts:
            for folder in (layout.home, layout.pki, layout.cni / "net.d"):
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
        for layout in self.layouts:
            for user, name in ((self.tokens[layout.member.name], "kubelet"),
                               (self.tokens["proxy"], "kube-proxy")):  # fmt: skip
                config = node_config.kubeconfig(state.server, ca, name, user)
                self._write_json(layout, f"{name}.kubeconfig", config)
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

        def until(what: str, check: Callable[[], bool], log: str | Path) -> None:
            self._until(what, check, state, log)

        for layout in self.layouts:
            node_member.start(self.plane, state, layout, found, cards, until, step)
        step("storage")
        api.create("/apis/storage.k8s.io/v1/storageclasses", node_config.storage_class())
        classes = [f"--class={node_config.STORAGE_CLASS}={self.layout.volumes}"]
        if network_storage:
            step("CephFS")
            classes.append(f"--class={self.network_storage().start(state, api, NODE_IP)}")
        provisioner = ["-m", "spyre_devcluster.provisioner", f"--kubeconfig={self.kubeconfig}"]
        self.plane.spawn(state, "provisioner", Path(sys.executable), provisioner + classes)
        for member in self.members:
            step(f"{member.name} Ready")
            self._wait_member(api, state, member, cards)
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

    def _wait_member(self, api: Api, state: State, member: Member, cards: dict[str, int]) -> None:
        kubelet = self.plane.run / f"{member.process(KUBELET)}.log"
        ready = functools.partial(self._ready, api, member.name)
        self._until(f"{member.name} to be Ready", ready, state, kubelet)
        if cards:
            plugin = self.plane.run / f"{member.process(DEVICE_PLUGIN)}.log"
            self._until(
                f"{member.name} to show its cards ({cards})",
                lambda: self.allocatable_cards(api, member.name) == cards,
                state,
                plugin,
            )

    @staticmethod
    def _write_json(layout: Layout, name: str, doc: object) -> None:
        layout.file(name).write_text(json.dumps(doc, indent=2))

    def network_storage(self) -> cephfs.OnNode:
        """The node's CephFS (`up(network_storage=True)`)."""
        return cephfs.OnNode(self.plane, self.layout, self._until)

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

    def ctr(self, layout: Layout | None = None) -> Ctr:
        """A client of a node's containerd (default: the first node's)."""
        return node_member.ctr(layout or self.layout)

    def import_image(self, image: Image, layout: Layout | None = None) -> None:
        """Into a node's containerd (default: the first node's)."""
        node_member.import_into(image, layout or self.layout)

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
    def allocatable_cards(api: Api, name: str = FIRST.name) -> dict[str, int]:
        """A node's allocatable Spyre cards, per resource that has any."""
        node = api.get(f"/api/v1/nodes/{name}")
        allocatable = node.get("status", {}).get("allocatable", {})
        found = {name: int(allocatable.get(name, "0")) for name in CARD_RESOURCES}
        return {name: count for name, count in found.items() if count}

    @staticmethod
    def _ready(api: Api, name: str) -> bool:
        try:
            node = api.get(f"/api/v1/nodes/{name}")
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

        def stop(names: set[str]) -> list[Process]:
            return [p for p in procs if p.name in names and self.plane.stop(p)]

        stopped = stop({m.process(n) for m in self.members for n in NODE_PROCESSES})
        for layout in self.layouts:
            name = layout.member.process(CONTAINERD)
            running = any(p.name == name for p in procs)
            if ours and running and node_member.containerd_answers(layout):
                node_member.remove_containers(layout)
        stopped += stop({m.process(CONTAINERD) for m in self.members})
        stopped += stop({m.process(NAMESPACES) for m in self.members})
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
        """Remove what the nodes' components leave on the host (idempotent; whatever
        number of nodes ran, also when the folder is gone)."""
        every = [FIRST, *FURTHER]
        for member in every:
            socket = str(member.run_dir / "containerd.sock")
            for pid in host.pids_with_cmdline("containerd-shim", socket):
                host.kill(pid)
        roots = [m.cgroup_root for m in every]
        host.kill_pod_processes(roots)
        host.unmount_under([self.dir, *(layout.containerd_root for layout in self.layouts)])
        host.remove_pod_cgroups(roots)
        host.remove_chains()
        host.delete_link(FIRST.bridge)
        node_netns.remove(FURTHER)

    def _restore_host(self, ours: bool) -> None:
        host.remove_paths([str(self.layout.dir)])
        if ours:
            saved = json.loads(self.state_file.read_text())
            if saved["lo_address"]:
                host.delete_lo_address(NODE_IP)
            host.restore_sysctls(saved["sysctls"])
            host.remove_paths([*saved["absent_paths"], str(RUN_DIR)])
            for layout in self.layouts:
                node_member.forget_cri_objects(layout)
        self.state_file.unlink()
