"""A kubelet device plugin advertising fake Spyre cards: the node tier's cards.

`cluster up --node --cards N` runs it as one of the node's processes
(`python -m spyre_devcluster.deviceplugin --resource ibm.com/spyre_pf=N`). For each
resource it serves the device-plugin API v1beta1 (GetDevicePluginOptions, ListAndWatch,
Allocate, PreStartContainer) on a socket of its own in the kubelet's device-plugin folder
and registers it on the kubelet's kubelet.sock. The kubelet then counts the cards in the
node's capacity and allocatable, admits pods against them and hands out device ids, so
scheduling, admission and "Insufficient ibm.com/spyre_pf" are Kubernetes' own. A card is
only an id: Allocate gives the container an env var naming its ids (FAKE_SPYRE_PF_DEVICES)
and no device node.

A kubelet that starts empties the folder (our sockets go) and makes a new kubelet.sock;
the plugin watches both and serves and registers again, as a real plugin must.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from spyre_devcluster import deviceplugin_api as api
from spyre_devcluster.node_config import CARD_RESOURCES, DEVICE_PLUGIN_DIR

KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
POLL_SECONDS = 0.5  # how soon a restarted kubelet gets the cards again
REGISTER_TIMEOUT = 10.0
# the kubelet keeps one ListAndWatch stream per resource open; a restart opens another
# before the old one is seen closed
WORKERS = 8
# PreStartContainer is required so the kubelet calls it before every container with cards
OPTIONS = api.DevicePluginOptions(pre_start_required=True)

SocketId = tuple[int, int, int]


def _kind(resource: str) -> str:
    """spyre_pf for ibm.com/spyre_pf."""
    return resource.split("/", 1)[1]


def device_ids(resource: str, count: int) -> list[str]:
    return [f"fake-{_kind(resource).replace('_', '-')}-{i}" for i in range(count)]


def socket_name(resource: str) -> str:
    """The plugin's socket, relative to the folder (RegisterRequest.endpoint)."""
    return f"fake-{_kind(resource)}.sock"


def env_name(resource: str) -> str:
    return f"FAKE_{_kind(resource).upper()}_DEVICES"


def parse_resource(text: str) -> tuple[str, int]:
    """NAME=COUNT of --resource, with a clear refusal."""
    name, _, count = text.partition("=")
    if name not in CARD_RESOURCES:
        raise argparse.ArgumentTypeError(
            f"unknown card resource {name!r}: use one of {', '.join(CARD_RESOURCES)}"
        )
    if not count.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: the count after '=' must be a number >= 0")
    return name, int(count)


def socket_id(path: Path) -> SocketId | None:
    """What tells one kubelet.sock from the next: a restarted kubelet makes a new file."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return (found.st_dev, found.st_ino, found.st_ctime_ns)  # an inode may be reused


def must_register(kubelet: SocketId | None, registered: SocketId | None, served: bool) -> bool:
    """Register (again) when a kubelet listens that we have not registered with, or when
    our sockets are gone (a kubelet starting empties the folder)."""
    return kubelet is not None and (kubelet != registered or not served)


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


class CardPlugin:
    """One resource's cards, served on its own socket."""

    def __init__(self, resource: str, count: int, folder: Path) -> None:
        self.resource = resource
        self.ids = device_ids(resource, count)
        self.socket = folder / socket_name(resource)
        self._server: grpc.Server | None = None
        self._stopping = threading.Event()

    # ----- the DevicePlugin service ----------------------------------------------
    def get_device_plugin_options(self, _request: Any, _context: Any) -> Any:
        return OPTIONS

    def list_and_watch(self, _request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        """The cards once (they never change), then hold the stream open: the kubelet
        takes its end as the plugin going away."""
        stopping = self._stopping
        devices = [api.Device(ID=card, health=HEALTHY) for card in self.ids]
        yield api.ListAndWatchResponse(devices=devices)
        while context.is_active() and not stopping.wait(1.0):
            pass

    def allocate(self, request: Any, context: grpc.ServicerContext) -> Any:
        responses = []
        for container in request.container_requests:
            ids = list(container.devicesIDs)
            unknown = sorted(set(ids) - set(self.ids))
            if unknown:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{self.resource}: no such device {', '.join(unknown)}",
                )
            _log(f"allocate {self.resource}: {','.join(ids)}")
            env = {env_name(self.resource): ",".join(ids)}
            responses.append(api.ContainerAllocateResponse(envs=env))
        return api.AllocateResponse(container_responses=responses)

    def pre_start_container(self, _request: Any, _context: Any) -> Any:
        return api.PreStartContainerResponse()

    def _handler(self) -> grpc.GenericRpcHandler:
        def unary(method: Any, request: Any, response: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                method, request.FromString, response.SerializeToString
            )

        return grpc.method_handlers_generic_handler(
            api.PLUGIN_SERVICE,
            {
                "GetDevicePluginOptions": unary(
                    self.get_device_plugin_options, api.Empty, api.DevicePluginOptions
                ),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self.list_and_watch,
                    api.Empty.FromString,
                    api.ListAndWatchResponse.SerializeToString,
                ),
                "Allocate": unary(self.allocate, api.AllocateRequest, api.AllocateResponse),
                "PreStartContainer": unary(
                    self.pre_start_container,
                    api.PreStartContainerRequest,
                    api.PreStartContainerResponse,
                ),
            },
        )

    # ----- serving and registering -----------------------------------------------
    @property
    def serving(self) -> bool:
        return self._server is not None and self.socket.exists()

    def serve(self) -> None:
        """(Re)start the server on a fresh socket."""
        self.stop()
        self._stopping = threading.Event()
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS))
        server.add_generic_rpc_handlers((self._handler(),))
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def register(self, kubelet_socket: Path) -> None:
        with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
            register = channel.unary_unary(
                api.REGISTRATION,
                request_serializer=api.RegisterRequest.SerializeToString,
                response_deserializer=api.Empty.FromString,
            )
            request = api.RegisterRequest(
                version=api.VERSION,
                endpoint=self.socket.name,
                resource_name=self.resource,
                options=OPTIONS,
            )
            register(request, timeout=REGISTER_TIMEOUT, wait_for_ready=True)

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.stop(grace=1.0).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)


def run(plugins: list[CardPlugin], folder: Path, stop: threading.Event) -> None:
    """Serve and register whenever a kubelet (re)appears, until stop is set."""
    kubelet_socket = folder / KUBELET_SOCKET
    registered: SocketId | None = None
    try:
        while not stop.is_set():
            kubelet = socket_id(kubelet_socket)
            served = all(p.serving for p in plugins)
            if must_register(kubelet, registered, served):
                try:
                    for plugin in plugins:
                        plugin.serve()
                        plugin.register(kubelet_socket)
                        _log(f"registered {plugin.resource}: {len(plugin.ids)} cards")
                    registered = kubelet
                except grpc.RpcError as err:
                    _log(f"registering failed, retrying: {err.code()} {err.details()}")
                    registered = None
            stop.wait(POLL_SECONDS)
    finally:
        for plugin in plugins:
            plugin.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spyre_devcluster.deviceplugin",
        description="Advertise fake Spyre cards to the local kubelet (the node tier).",
    )
    parser.add_argument(
        "--resource",
        type=parse_resource,
        action="append",
        required=True,
        metavar="NAME=COUNT",
        help=f"a card resource and how many cards it has; NAME is one of "
        f"{', '.join(CARD_RESOURCES)}",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEVICE_PLUGIN_DIR,
        help=f"the kubelet's device-plugin folder (default {DEVICE_PLUGIN_DIR})",
    )
    args = parser.parse_args(argv)
    plugins = [CardPlugin(name, count, args.dir) for name, count in dict(args.resource).items()]
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    _log(f"waiting for {args.dir / KUBELET_SOCKET}")
    run(plugins, args.dir, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
