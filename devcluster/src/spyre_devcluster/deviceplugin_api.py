"""The messages of the kubelet's device-plugin API v1beta1 that the fake card plugin uses,
built in code as protobuf descriptors (no generated files, no protoc).

Only the fields the plugin reads or writes are declared: protobuf skips unknown fields,
so the kubelet's topology hints or mounts in messages we never build do no harm. Field
names and numbers are those of the API (package `v1beta1`), which is what the wire
carries; the rest is ours.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "v1beta1"
VERSION = "v1beta1"  # RegisterRequest.version the kubelet accepts
REGISTRATION = f"/{PACKAGE}.Registration/Register"
PLUGIN_SERVICE = f"{PACKAGE}.DevicePlugin"

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _BOOL, _MESSAGE = _F.TYPE_STRING, _F.TYPE_BOOL, _F.TYPE_MESSAGE
_MAP = "map"  # map<string, string>

# message -> (field, number, type, repeated); a str type names another message
MESSAGES: dict[str, list[tuple[str, int, Any, bool]]] = {
    "Empty": [],
    "DevicePluginOptions": [
        ("pre_start_required", 1, _BOOL, False),
        ("get_preferred_allocation_available", 2, _BOOL, False),
    ],
    "RegisterRequest": [
        ("version", 1, _STRING, False),
        ("endpoint", 2, _STRING, False),  # the plugin's socket, relative to the kubelet's
        ("resource_name", 3, _STRING, False),
        ("options", 4, "DevicePluginOptions", False),
    ],
    "Device": [("ID", 1, _STRING, False), ("health", 2, _STRING, False)],
    "ListAndWatchResponse": [("devices", 1, "Device", True)],
    "PreStartContainerRequest": [("devicesIDs", 1, _STRING, True)],
    "PreStartContainerResponse": [],
    "ContainerAllocateRequest": [("devicesIDs", 1, _STRING, True)],
    "AllocateRequest": [("container_requests", 1, "ContainerAllocateRequest", True)],
    "ContainerAllocateResponse": [("envs", 1, _MAP, False), ("annotations", 4, _MAP, False)],
    "AllocateResponse": [("container_responses", 1, "ContainerAllocateResponse", True)],
}


def _field(
    message: descriptor_pb2.DescriptorProto, name: str, number: int, kind: Any, repeated: bool
) -> None:
    field = message.field.add(name=name, number=number, json_name=name)
    field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if kind == _MAP:
        # a map is a repeated nested entry message with key = 1 and value = 2
        entry = message.nested_type.add(name=f"{name[0].upper()}{name[1:]}Entry")
        entry.options.map_entry = True
        for sub, num in (("key", 1), ("value", 2)):
            entry.field.add(name=sub, number=num, type=_STRING, label=_F.LABEL_OPTIONAL)
        field.label = _F.LABEL_REPEATED
        field.type, field.type_name = _MESSAGE, f".{PACKAGE}.{message.name}.{entry.name}"
    elif isinstance(kind, str):
        field.type, field.type_name = _MESSAGE, f".{PACKAGE}.{kind}"
    else:
        field.type = kind


def _build() -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(
        name="spyre_operator/deviceplugin_v1beta1.proto", package=PACKAGE, syntax="proto3"
    )
    for name, fields in MESSAGES.items():
        message = proto.message_type.add(name=name)
        for spec in fields:
            _field(message, *spec)
    pool = descriptor_pool.DescriptorPool()  # our own: never clashes with another v1beta1
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in MESSAGES
    }


_CLASSES = _build()
Empty = _CLASSES["Empty"]
DevicePluginOptions = _CLASSES["DevicePluginOptions"]
RegisterRequest = _CLASSES["RegisterRequest"]
Device = _CLASSES["Device"]
ListAndWatchResponse = _CLASSES["ListAndWatchResponse"]
PreStartContainerRequest = _CLASSES["PreStartContainerRequest"]
PreStartContainerResponse = _CLASSES["PreStartContainerResponse"]
ContainerAllocateRequest = _CLASSES["ContainerAllocateRequest"]
AllocateRequest = _CLASSES["AllocateRequest"]
ContainerAllocateResponse = _CLASSES["ContainerAllocateResponse"]
AllocateResponse = _CLASSES["AllocateResponse"]
