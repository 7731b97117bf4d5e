"""Numeric precision of training and of the rollouts: weight dtypes, autocast, the float32 LM head.

Mixed precision (``model.mixed_precision``, bf16 on GPU by default) keeps float32 master weights and
runs the forward pass under ``torch.autocast``. The HF engine generates under the same autocast
(``compute_dtype``), so the logprobs it reports come from the numeric path the trainer recomputes.

One layer is kept out of bf16 on both sides: the LM head (``use_float32_head``). Autocast would
return the logits in bf16, whose spacing grows with their size (1/64 at 2, 1/8 at 16): once training
sharpens the distribution the rounding of the logits alone moves a sampled token's logprob by
several hundredths, differently in the engine's decoding step and in the trainer's full forward.
Measured on CPU (a random 6-layer Llama, logits scaled to a standard deviation of 13): bf16
engine vs bf16 trainer 0.029 mean absolute logprob difference with a bf16 head, 0.003 with the
float32 head (a float32 engine against the bf16 trainer: 0.25). The head's matrix products use
TF32 tensor cores on CUDA (inputs rounded to 10 mantissa bits, float32 accumulation and output).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from ..core import CascadeError
from .config import ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(name: str) -> torch.dtype:
    """The trained weights' dtype (``auto``: float32 master weights)."""
    if name == "auto":
        return torch.float32
    if name not in DTYPES:
        raise CascadeError(f"model.dtype must be auto, float32, bfloat16 or float16, got {name!r}")
    return DTYPES[name]


def compute_dtype(config: ModelConfig, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of the forward passes (``None``: no autocast; ``auto`` is bf16 on GPU only)."""
    name = config.mixed_precision
    if name == "auto":
        name = "bfloat16" if device.type == "cuda" else "no"
    return None if name == "no" else DTYPES[name]


def autocast(config: ModelConfig, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The autocast context of the training forward pass (bf16 on GPU by default, off on CPU)."""
    dtype = compute_dtype(config, device)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def _tf32(device: torch.device) -> Iterator[None]:
    """TF32 tensor cores for float32 matrix products on CUDA, for the block only (no-op elsewhere)."""
    if device.type != "cuda":
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


class _Float32Linear(torch.autograd.Function):
    """``x @ weight.T`` in float32, outside autocast, forward and backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor) -> Tensor:
        ctx.save_for_backward(x, weight)
        with torch.autocast(x.device.type, enabled=False), _tf32(x.device):
            return x.float() @ weight.float().t()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        grad_x = grad_w = None
        with _tf32(grad.device):
            if ctx.needs_input_grad[0]:
                grad_x = (grad @ weight.float()).to(x.dtype)
            if ctx.needs_input_grad[1]:
                grad_w = (grad.flatten(0, -2).t() @ x.float().flatten(0, -2)).to(weight.dtype)
        return grad_x, grad_w


class Float32Head(torch.nn.Linear):
    """A bias-free LM head whose logits are computed in float32 (see the module docstring)."""

    def forward(self, input: Tensor) -> Tensor:
        return _Float32Linear.apply(input, self.weight)


def use_float32_head(model: Any, config: ModelConfig, device: torch.device) -> bool:
    """Compute ``model``'s LM head in float32 when the rest runs in a lower precision (autocast or
    bf16/fp16 weights); returns whether it does. The head keeps its (possibly tied) weight."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    low = compute_dtype(config, device) is not None or resolve_dtype(config.dtype) != torch.float32
    if isinstance(head, Float32Head):
        return True
    if not low or type(head) is not torch.nn.Linear or head.bias is not None:
        return False
    head.__class__ = Float32Head
    return True
