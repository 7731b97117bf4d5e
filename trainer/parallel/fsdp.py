"""FSDP2 sharding of a Hugging Face causal LM: one ``fully_shard`` unit per decoder block, then the root.

Mixed precision on GPU keeps float32 master weights (the shards) and computes in the autocast dtype
(``MixedPrecisionPolicy``: parameters cast for compute, gradients reduced in float32); activation
checkpointing is the model's own (``model.gradient_checkpointing``, on by default on GPU);
``train.cpu_offload`` keeps shards, gradients and optimizer state in CPU memory (GPU only).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.device_mesh import init_device_mesh

from ...core import CascadeError


def blocks(model: Any) -> list[torch.nn.Module]:
    """The model's repeated blocks (Hugging Face's ``_no_split_modules`` classes: decoder layers)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    found = [m for m in model.modules() if type(m).__name__ in names]
    if not found:
        raise CascadeError(
            f"{type(model).__name__} names no decoder-block class (_no_split_modules), so it cannot be sharded "
            "block by block; use a Hugging Face causal LM"
        )
    return found


def shard_model(
    model: Any, world_size: int, device: torch.device, compute_dtype: torch.dtype | None, cpu_offload: bool
) -> Any:
    """Shard ``model`` in place over ``world_size`` ranks; returns it (now an ``FSDPModule``)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    if cpu_offload and device.type != "cuda":
        raise CascadeError("train.cpu_offload moves GPU shards to CPU memory; on a CPU run set it to false")
    mesh = init_device_mesh(device.type, (world_size,))
    kwargs: dict[str, Any] = {"mesh": mesh}
    if compute_dtype is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    for block in blocks(model):
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def full_state_dict(model: Any, cpu_offload: bool = False) -> dict[str, Any]:
    """The unsharded weights on every rank, or with ``cpu_offload`` in CPU memory on rank 0 only (the
    others get ``{}``). A collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload)
    return get_model_state_dict(model, options=options)


def sum_gradients(model: Any, world_size: int) -> list[torch.Tensor]:
    """The parameters with gradients, their gradients turned from FSDP's mean over ranks into the sum.

    Each rank's loss is already divided by the whole batch's token or response count, so the sum is
    the one-process gradient (gloo has no pre-scaled reduction, ``set_gradient_divide_factor(1)``)."""
    params = [p for p in model.parameters() if p.grad is not None]
    if world_size > 1:
        torch._foreach_mul_([p.grad for p in params], float(world_size))
    return params


def grad_norm_value(total: torch.Tensor) -> float:
    """A norm from ``clip_grad_norm_`` over sharded gradients (a DTensor) as the global float."""
    full = getattr(total, "full_tensor", None)
    return float(full() if full is not None else total)
