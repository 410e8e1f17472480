"""What model a SpyreModel serves and where its weights come from (a pvc, a hostPath, the
Hugging Face hub): spec.model."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from spyre_operator.api import runtimes
from spyre_operator.api.base import ApiModel, ObjectName
from spyre_operator.api.k8s_types import SecretKey

QUANTIZED_NAME = re.compile(r"fp8|gptq|w[0-9]+a[0-9]+", re.IGNORECASE)
AbsolutePath = Annotated[str, Field(pattern=r"^/", max_length=4096)]


class SecretKeyRef(ApiModel):
    name: ObjectName
    """Name of the Secret."""
    key: SecretKey = "token"
    """Key in the Secret."""


class PvcSource(ApiModel):
    claim_name: ObjectName
    """PersistentVolumeClaim holding the model files."""
    sub_path: Annotated[str, Field(max_length=4096)] | None = None
    """Directory inside the claim to mount instead of its root."""
    mount_path: AbsolutePath = "/models"
    """Where the claim is mounted (read-only) in the container."""


class HostPathSource(ApiModel):
    path: AbsolutePath
    """Directory on the node holding the model files."""
    mount_path: AbsolutePath = "/models"
    """Where the directory is mounted (read-only) in the container."""


class HubSource(ApiModel):
    """The weights Job downloads the model once into the cache volume; the compile and
    serving pods load it from there with the hub switched off."""

    token_secret: SecretKeyRef | None = None
    """Secret key with a Hugging Face token (gated or private models); only the weights Job
    gets it (as HF_TOKEN), never the compile or serving pods."""
    endpoint: Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=2048)] | None = None
    """Hub endpoint (HF_ENDPOINT of the weights Job), e.g. a mirror; unset is
    https://huggingface.co."""


class ModelSource(ApiModel):
    """Where the weights come from: exactly one of pvc, hostPath, hub."""

    pvc: PvcSource | None = None
    """A PersistentVolumeClaim holding the model directory."""
    host_path: HostPathSource | None = None
    """A directory on the node (needs a hostPath-capable security policy)."""
    hub: HubSource | None = None

    @property
    def mount(self) -> PvcSource | HostPathSource | None:
        return self.pvc or self.host_path


class ModelSpec(ApiModel):
    id: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """Hugging Face model id (e.g. ibm-granite/granite-3.3-8b-instruct); also names the
    model for the known-config registry."""
    path: AbsolutePath | None = None
    """Model directory in the container, under the pvc/hostPath mountPath."""
    revision: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """Model revision (branch, tag or commit) to download from the hub; default main. The
    weights Job resolves it to a commit once (status.weights.commit), and the cache key
    uses that commit."""
    served_name: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """Name clients use in requests (--served-model-name); defaults to the id."""
    quantization: Literal["gptq", "compressed-tensors"] | None = None
    """Quantization of the weights (--quantization): gptq or compressed-tensors (FP8
    checkpoints are compressed-tensors); unset lets vLLM read it from the model config."""
    source: ModelSource = Field(default_factory=lambda: ModelSource(hub=HubSource()))
    """Where the weights come from: exactly one of pvc, hostPath, hub; defaults to the
    Hugging Face hub."""

    @property
    def argument(self) -> str:
        """What names the model (cache key, known-config registry): the local path of a
        pvc/hostPath model, else the hub id."""
        return self.path or self.id or ""

    @property
    def from_hub(self) -> bool:
        return self.source.hub is not None

    @property
    def hub_revision(self) -> str:
        return self.revision or "main"

    @property
    def load_path(self) -> str:
        """The model argument of `vllm serve`: the path, or for a hub model its read-only
        copy from the cache volume."""
        if self.from_hub:
            return f"{runtimes.MODELS_ROOT}/{self.id}"
        return self.argument

    @property
    def is_quantized(self) -> bool:
        """Quantized as far as the spec tells: quantization is set, or the id/path names a
        quantized checkpoint. A checkpoint whose config alone says so is only known to vLLM
        (docs/api.md)."""
        name = (self.id or "") + " " + (self.path or "")
        return self.quantization is not None or QUANTIZED_NAME.search(name) is not None
