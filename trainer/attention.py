"""Attention kernels: what the model runs (``model.attn_implementation``), and how packed rows reach a
fused kernel (``packed_kernel``).

- ``sdpa`` (transformers' default) and ``eager``: a packed row shares each prompt under a dense
  ``[L, L]`` tree mask (``packing.py``). Exact and fast on CPU; on a GPU a dense mask gets no fused
  kernel (measured on an H200 at 0.5B: 18x slower than the padded pass at 1024-token rows).
- ``flash_attention_2`` (the ``flash-attn`` package, CUDA): packed rows run as varlen segments from
  the reset position ids; a segment cannot share its prompt, so each sequence brings its own copy.
- ``flex_attention``: every pass that is not a packed row (padded passes, generation) runs sdpa; a
  packed row runs torch's ``flex_attention`` with the shared-prompt tree as a ``BlockMask``, so only
  the 128x128 blocks holding a visible pair are computed. ``torch.compile``'d on CUDA; on CPU it runs
  eagerly and has no backward (torch provides none there): it serves forward checks only.
- ``auto``: on CUDA ``flash_attention_2`` where flash-attn is installed, else ``flex_attention``
  where torch has it; ``sdpa`` otherwise (and always on CPU).

``flex_attention`` is registered with transformers as its own implementation (``FLEX``), whose mask
function is sdpa's, so every path that builds masks keeps building sdpa's.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from ..core import CascadeError
from .config import ConfigError, ModelConfig

FLEX = "cascade_flex"
"""The transformers attention implementation of ``model.attn_implementation: flex_attention``."""

PackedKernel = Literal["varlen", "flex", "dense"]


def flash_available() -> bool:
    return importlib.util.find_spec("flash_attn") is not None and torch.cuda.is_available()


def flex_available(device: torch.device) -> bool:
    """torch has ``flex_attention`` (2.5+), and on CUDA Triton to compile it."""
    if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
        return False
    return device.type != "cuda" or importlib.util.find_spec("triton") is not None


@dataclass(frozen=True)
class Attention:
    """The attention implementation a model runs (``name``) and is loaded with (``load_as``; ``None``:
    transformers' default, sdpa where the model has it)."""

    name: str
    load_as: str | None = None

    def apply(self, model: Any) -> None:
        if self.name == FLEX:
            use_flex(model)


def load_attention(config: ModelConfig, device: torch.device) -> Attention:
    """The implementation ``model.attn_implementation`` names on ``device`` (``auto``: see the module docstring)."""
    name = config.attn_implementation
    if name == "auto":
        if device.type == "cuda" and flash_available():
            name = "flash_attention_2"
        elif device.type == "cuda" and flex_available(device):
            name = "flex_attention"
        else:
            return Attention("sdpa")
    if name == "flash_attention_2" and not flash_available():
        raise ConfigError(
            "model.attn_implementation: flash_attention_2 needs a CUDA device and the flash-attn package "
            "(pip install flash-attn); use flex_attention or sdpa"
        )
    if name == "flex_attention":
        if not flex_available(device):
            raise ConfigError(
                f"model.attn_implementation: flex_attention needs torch >= 2.5 (and Triton on CUDA); this is "
                f"torch {torch.__version__}: use sdpa"
            )
        return Attention(FLEX)
    return Attention(name, name)


def use_flex(model: Any) -> None:
    """Run ``model``'s attention through ``FLEX`` (registered once with transformers)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(FLEX, _attention)
    AttentionMaskInterface.register(FLEX, sdpa_mask)
    model.config._attn_implementation = FLEX


def packed_kernel(model: Any) -> PackedKernel:
    """How a packed row reaches attention: ``varlen`` (segments from position ids; prompts are not
    shared), ``flex`` (tree block mask) or ``dense`` (tree as a dense mask: sdpa, eager).

    Sliding-window layers get ``varlen`` too: transformers uses a given mask as is, so the window would be lost.
    """
    config = model.config
    window = getattr(config, "sliding_window", None) is not None
    sliding = window and getattr(config, "use_sliding_window", None) is not False
    sliding = sliding or "sliding_attention" in (getattr(config, "layer_types", None) or ())
    name = getattr(config, "_attn_implementation", None)
    if sliding or name not in ("sdpa", "eager", FLEX):
        return "varlen"
    return "flex" if name == FLEX else "dense"


def tree_block_mask(segment: Tensor, owner: Tensor) -> Any:
    """The shared-prompt tree of a packed row as a flex ``BlockMask``: token ``q`` sees ``kv <= q`` of
    its segment, on the prompt (``owner == -1``) or in its own response (``packing._tree_mask``'s rule)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def visible(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        same = segment[q] == segment[kv]
        return (kv <= q) & same & ((owner[kv] == -1) | (owner[kv] == owner[q]))

    n = int(segment.shape[0])
    return create_block_mask(visible, None, None, n, n, device=segment.device)


_compiled: Any = None


def _flex_kernel(device: torch.device) -> Any:
    """``flex_attention``, compiled on CUDA once per process with dynamic shapes (a packed row's length
    changes every step; a recompile per length would cost seconds each); eager elsewhere."""
    global _compiled
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        return flex_attention
    if _compiled is None:
        _compiled = torch.compile(flex_attention, dynamic=True)
    return _compiled


def _attention(
    module: Any,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """``FLEX``: flex_attention for a ``BlockMask`` (a packed row), transformers' sdpa otherwise."""
    from torch.nn.attention.flex_attention import BlockMask
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not isinstance(attention_mask, BlockMask):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if dropout:
        raise CascadeError("flex_attention packed rows take no attention dropout; set the model's to 0")
    device = query.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else query.dtype
    q, k, v = (t.to(dtype) for t in (query, key, value))  # under autocast rope leaves q, k in float32
    with warnings.catch_warnings():  # eager flex on CPU says it is unfused: it is meant to be
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out = _flex_kernel(query.device)(
            q, k, v, block_mask=attention_mask, scale=scaling, enable_gqa=q.shape[1] != k.shape[1]
        )
    return out.transpose(1, 2).contiguous(), None
