"""The optimizer pass's layout (packed rows or padded micro-batches) and its size, per device.

**Pass size** (``train.pack_tokens``, ``optim.micro_batch_size``). Set, they are used as given. ``auto``:
on CPU a 1024-token packed row or 8 padded sequences (measured on 2 cores: larger passes are no
faster, and memory is the host's); on CUDA the tokens whose activations fit in ``MEMORY_SHARE`` of
the device memory free at the start of the step (the driver's free memory plus the allocator's cached
blocks), from ``bytes_per_token``, between ``MIN_PASS_TOKENS`` and ``MAX_PASS_TOKENS``; a padded
micro-batch then holds as many sequences as its padded tokens allow. Sizes come from free memory at
each step, never from the host: no pass waits on a device read.

**Layout** (``train.packing``). ``auto``: when packed rows reach a fused kernel
(``attention.packed_kernel``: flex block masks, or flash-attention varlen; on CUDA the default
attention gives one), the first optimizer step times one pass of each layout on its own sequences
(after an untimed pass that compiles) and the run keeps the faster per token; a layout that fails
there (a kernel that does not compile, or flex on CPU, which has no backward) is left out, and a packed
layout chosen so that fails at a later pass (a recompile, out of memory) turns padded for the rest of the
run, that step's passes redone (``Trainer._optimize``). Otherwise a
rule: packed on CPU (the dense tree mask halves the CPU pass at the default run's shape: 2,752 padded
against 1,260 packed tokens per step), padded on CUDA (a dense mask gets no fused kernel: measured
18x slower than the padded pass on an H200). A sharded run never measures (its ranks must agree):
packed on CUDA only through flash-attention. The choice is logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from .attention import packed_kernel
from .config import BatchSize
from .model import is_checkpointing

log = logging.getLogger("cascade_envs.trainer")

MEMORY_SHARE = 0.3
MIN_PASS_TOKENS = 1024
MAX_PASS_TOKENS = 32768
"""A flex block mask is made from the row's dense ``[L, L]`` mask (1 GiB of booleans at this size)."""
CPU_PASS_TOKENS = 1024
CPU_MICRO_BATCH = 8


@dataclass(frozen=True)
class PassSize:
    """How much one pass holds: ``tokens`` (a packed row; a padded micro-batch's padded tokens when
    ``sequences`` is ``None``) and ``sequences`` (a padded micro-batch's count, when set)."""

    tokens: int
    sequences: int | None


def bytes_per_token(model: Any, checkpointing: bool) -> int:
    """An upper estimate of the device memory one token of a training pass needs: the layer inputs kept
    for the backward (all of one layer's activations without checkpointing) plus the float32 logits,
    their gradient and the log-softmax's working copy (counted for every token)."""
    c = model.config
    hidden, layers = int(c.hidden_size), int(c.num_hidden_layers)
    inner = int(getattr(c, "intermediate_size", None) or 4 * hidden)
    layer = (16 * hidden + 6 * inner) * 2  # one decoder layer's saved activations, mostly bf16
    kept = layers * hidden * 4 + layer if checkpointing else layers * layer
    return kept + 12 * int(c.vocab_size)


def free_memory(device: torch.device) -> int:
    """Bytes a pass can take on ``device``: the driver's free memory plus the allocator's unused cache."""
    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def budget_tokens(model: Any, free_bytes: int) -> int:
    """The tokens of one CUDA pass when ``free_bytes`` are free (see the module docstring)."""
    fit = int(free_bytes * MEMORY_SHARE) // bytes_per_token(model, is_checkpointing(model))
    return min(max(fit, MIN_PASS_TOKENS), MAX_PASS_TOKENS)


def pass_size(pack_tokens: BatchSize, micro_batch_size: BatchSize, model: Any) -> PassSize:
    """The pass size the settings give for ``model`` on its device (see the module docstring)."""
    device = next(model.parameters()).device
    sequences = None if micro_batch_size == "auto" else micro_batch_size
    if pack_tokens != "auto":
        tokens = pack_tokens
    elif device.type != "cuda":
        tokens = CPU_PASS_TOKENS
    else:
        tokens = budget_tokens(model, free_memory(device))
    if sequences is None and device.type != "cuda":
        sequences = CPU_MICRO_BATCH
    return PassSize(tokens, sequences)


def fused(model: Any) -> bool:
    """Whether packed rows of ``model`` reach a fused attention kernel (flex, or flash-attention varlen)."""
    kernel = packed_kernel(model)
    name = str(getattr(model.config, "_attn_implementation", ""))
    return kernel == "flex" or (kernel == "varlen" and name.startswith("flash"))


def rule(model: Any) -> bool:
    """The layout without measuring: packed on CPU; on CUDA only through flash-attention varlen."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return True
    return fused(model) and packed_kernel(model) == "varlen"


def time_per_token(
    candidates: dict[bool, Callable[[], int]], device: torch.device
) -> dict[bool, float | str]:
    """Seconds per token of each candidate layout (a callable running one pass, returning the tokens
    of its sequences), timed on its second call; a candidate that raises gets its error instead."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    out: dict[bool, float | str] = {}
    for packed, run in candidates.items():
        try:
            run()  # compiles, autotunes and grows the allocator
            sync()
            start = time.perf_counter()
            tokens = run()
            sync()
            out[packed] = (time.perf_counter() - start) / max(tokens, 1)
        except Exception as exc:  # e.g. a kernel that fails to compile, or out of memory: not a candidate
            out[packed] = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return out


def choose(setting: Literal["auto"] | bool, model: Any, run_pass: Callable[[bool], int]) -> tuple[bool, str]:
    """The layout ``train.packing`` gives and a line saying why: as set; ``auto`` measured with
    ``run_pass`` (one pass of a layout, returning its sequences' tokens) when packed rows are fused,
    else the rule."""
    if setting != "auto":
        return setting, f"train.packing: {str(setting).lower()}"
    if not fused(model):
        packed = rule(model)
        device = next(model.parameters()).device
        return packed, f"train.packing auto on {device.type}: {'packed' if packed else 'padded'} (rule)"
    device = next(model.parameters()).device
    return decide(
        time_per_token({True: lambda: run_pass(True), False: lambda: run_pass(False)}, device), model
    )


def decide(timings: dict[bool, float | str], model: Any) -> tuple[bool, str]:
    """The faster layout of ``timings`` (the padded one if none could run) and a line saying why."""
    name = {True: f"packed ({packed_kernel(model)})", False: "padded"}
    measured = {k: v for k, v in timings.items() if isinstance(v, float)}
    packed = min(measured, key=lambda k: measured[k]) if measured else False
    cells = [
        f"{name[k]} {v * 1e6:.2f} us/token" if isinstance(v, float) else f"{name[k]} failed: {v}"
        for k, v in timings.items()
    ]
    device = next(model.parameters()).device
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return packed, f"train.packing auto on {where}: {', '.join(cells)} -> {name[packed]}"
