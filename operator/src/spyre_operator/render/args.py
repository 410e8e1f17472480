"""spec -> container args: [subcommand, <vllm serve args>] (docs/contract.md)."""

from __future__ import annotations

from spyre_operator.api.runtimes import SERVING_PORT
from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.render.env import Role


def vllm_args(spec: SpyreModelSpec, role: Role) -> list[str]:
    """The same for both roles except the serving-only flags (they do not shape graphs)."""
    model, cb = spec.model, spec.batching.continuous
    # A hub model is loaded from its downloaded copy: no --revision, the hub is off.
    args = [model.load_path]
    if model.quantization:
        args += ["--quantization", model.quantization]
    if spec.is_pooling:
        args += ["--runner", "pooling"]
    args += ["--tensor-parallel-size", str(spec.tensor_parallel_size)]
    if cb is not None:
        shapes = {
            "--max-model-len": cb.max_model_len,
            "--max-num-seqs": cb.max_num_seqs,
            "--max-num-batched-tokens": cb.max_num_batched_tokens,
        }
        args += [part for flag, value in shapes.items() for part in (flag, str(value))]
        args.append(
            "--enable-prefix-caching" if cb.prefix_caching else "--no-enable-prefix-caching"
        )
        if cb.num_gpu_blocks_override is not None:
            args += ["--num-gpu-blocks-override", str(cb.num_gpu_blocks_override)]
    if role == "serve":
        served = model.served_name or (model.id if model.load_path != model.id else None)
        if served:
            args += ["--served-model-name", served]
        args += ["--port", str(SERVING_PORT)]
    return args + spec.extra_args


def container_args(spec: SpyreModelSpec, role: Role) -> list[str]:
    if role in ("weights", "clean", "pull"):
        return [role]  # everything else is in its env
    return [role, *vllm_args(spec, role)]
