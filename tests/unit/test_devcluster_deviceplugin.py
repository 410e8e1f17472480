"""The fake card plugin's pure parts, and its gRPC API spoken over real unix sockets to a
stand-in for the kubelet's Registration service (the real kubelet:
tests/node/test_node_cards.py)."""

from __future__ import annotations

import argparse
import queue
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from spyre_devcluster import deviceplugin_api as api
from spyre_devcluster.deviceplugin import (
    KUBELET_SOCKET,
    CardPlugin,
    device_ids,
    env_name,
    must_register,
    parse_resource,
    run,
    socket_id,
    socket_name,
)
from spyre_devcluster.node_config import SPYRE_PF, SPYRE_VF

pytestmark = pytest.mark.unit

WAIT = 20.0


def test_cards_are_numbered_per_resource() -> None:
    assert device_ids(SPYRE_PF, 3) == ["fake-spyre-pf-0", "fake-spyre-pf-1", "fake-spyre-pf-2"]
    assert device_ids(SPYRE_VF, 1) == ["fake-spyre-vf-0"]
    assert device_ids(SPYRE_PF, 0) == []
    assert socket_name(SPYRE_PF) != socket_name(SPYRE_VF)
    assert env_name(SPYRE_VF) == "FAKE_SPYRE_VF_DEVICES"


def test_resource_arguments_are_checked() -> None:
    assert parse_resource("ibm.com/spyre_pf=8") == (SPYRE_PF, 8)
    with pytest.raises(argparse.ArgumentTypeError, match=r"unknown card resource 'nvidia\."):
        parse_resource("nvidia.com/gpu=1")
    with pytest.raises(argparse.ArgumentTypeError, match="must be a number"):
        parse_resource("ibm.com/spyre_pf=-1")


def test_registers_again_for_a_new_kubelet_or_lost_sockets() -> None:
    first, second = (1, 10, 5), (1, 10, 6)  # the same inode, made again
    assert not must_register(None, None, served=False)  # no kubelet yet
    assert must_register(first, None, served=False)
    assert not must_register(first, first, served=True)
    assert must_register(second, first, served=True)  # a restarted kubelet: a new socket
    assert must_register(first, first, served=False)  # the folder was emptied


def test_the_messages_round_trip_on_the_wire() -> None:
    response = api.AllocateResponse(
        container_responses=[api.ContainerAllocateResponse(envs={"A": "1,2"})]
    )
    back = api.AllocateResponse.FromString(response.SerializeToString())
    assert dict(back.container_responses[0].envs) == {"A": "1,2"}


class Kubelet:
    """The kubelet's Registration service on kubelet.sock (what the plugin talks to)."""

    def __init__(self, folder: Path) -> None:
        self.requests: queue.Queue[Any] = queue.Queue()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(
            self._register, api.RegisterRequest.FromString, api.Empty.SerializeToString
        )
        service, method = api.REGISTRATION.strip("/").split("/")
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {method: handler}),)
        )
        self.server.add_insecure_port(f"unix://{folder / KUBELET_SOCKET}")
        self.server.start()

    def _register(self, request: Any, _context: Any) -> Any:
        self.requests.put(request)
        return api.Empty()

    def stop(self) -> None:
        self.server.stop(grace=None).wait()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    found = tmp_path / "dp"
    found.mkdir()
    return found


@pytest.fixture
def running(folder: Path) -> Iterator[tuple[CardPlugin, threading.Event]]:
    plugin = CardPlugin(SPYRE_PF, 4, folder)
    stop = threading.Event()
    thread = threading.Thread(target=run, args=([plugin], folder, stop), daemon=True)
    thread.start()
    yield plugin, stop
    stop.set()
    thread.join(WAIT)
    assert not thread.is_alive()


def call(socket: Path, method: str, request: Any, response: Any) -> Any:
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        rpc = channel.unary_unary(
            f"/{api.PLUGIN_SERVICE}/{method}",
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )
        return rpc(request, timeout=WAIT)


def test_the_plugin_registers_lists_and_allocates_its_cards(
    folder: Path, running: tuple[CardPlugin, threading.Event]
) -> None:
    plugin, _ = running
    kubelet = Kubelet(folder)
    try:
        registered = kubelet.requests.get(timeout=WAIT)
        assert (registered.version, registered.resource_name) == ("v1beta1", SPYRE_PF)
        assert registered.endpoint == plugin.socket.name
        assert registered.options.pre_start_required
        socket = folder / registered.endpoint

        options = call(socket, "GetDevicePluginOptions", api.Empty(), api.DevicePluginOptions)
        assert options.pre_start_required
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stream = channel.unary_stream(
                f"/{api.PLUGIN_SERVICE}/ListAndWatch",
                request_serializer=api.Empty.SerializeToString,
                response_deserializer=api.ListAndWatchResponse.FromString,
            )(api.Empty(), timeout=WAIT)
            listed = next(stream)
            stream.cancel()
        assert [(d.ID, d.health) for d in listed.devices] == [
            (f"fake-spyre-pf-{i}", "Healthy") for i in range(4)
        ]
        wanted = ["fake-spyre-pf-1", "fake-spyre-pf-3"]
        request = api.AllocateRequest(
            container_requests=[api.ContainerAllocateRequest(devicesIDs=wanted)]
        )
        allocated = call(socket, "Allocate", request, api.AllocateResponse)
        assert dict(allocated.container_responses[0].envs) == {
            "FAKE_SPYRE_PF_DEVICES": "fake-spyre-pf-1,fake-spyre-pf-3"
        }
        pre_start = api.PreStartContainerRequest(devicesIDs=wanted)
        call(socket, "PreStartContainer", pre_start, api.PreStartContainerResponse)

        bad = api.AllocateRequest(
            container_requests=[api.ContainerAllocateRequest(devicesIDs=["fake-spyre-pf-9"])]
        )
        with pytest.raises(grpc.RpcError) as refused:
            call(socket, "Allocate", bad, api.AllocateResponse)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "no such device fake-spyre-pf-9" in (refused.value.details() or "")
    finally:
        kubelet.stop()


def test_a_restarted_kubelet_gets_the_cards_again(
    folder: Path, running: tuple[CardPlugin, threading.Event]
) -> None:
    first = Kubelet(folder)
    first.requests.get(timeout=WAIT)
    first.stop()
    # a starting kubelet empties the folder and listens on a new kubelet.sock
    for path in folder.iterdir():
        path.unlink()
    second = Kubelet(folder)
    try:
        again = second.requests.get(timeout=WAIT)
        assert again.resource_name == SPYRE_PF
        assert (folder / again.endpoint).exists()
        assert socket_id(folder / KUBELET_SOCKET) is not None
    finally:
        second.stop()
