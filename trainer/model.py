"""The training model: loading, and log-probabilities of sampled responses in micro-batches.

Sequence layout of a micro-batch: prompts left-padded to a common length ``P`` and responses
right-padded to ``R``, so every response starts at column ``P``. Position ids count real tokens
only (as generation does), and the model computes logits for the last ``R + 1`` columns only —
the LM head never runs on prompt tokens.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._extras import require
from ..policies.decoding import left_pad
from ..policies.shared_decoding import cache_keyword
from .attention import load_attention
from .config import ModelConfig, model_path
from .precision import resolve_dtype, use_float32_head
from .sequence import TrainSequence


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_model(config: ModelConfig, path: str | Path | None = None) -> tuple[Any, Any]:
    """Load the causal LM and its tokenizer for training (``path`` overrides ``config.path``)."""
    require("transformers", "training")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(path) if path is not None else model_path(config.path)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    attention = load_attention(config, device)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation=attention.load_as)
    attention.apply(model)
    # as the nn.Module it is: transformers declares PreTrainedModel.to through functools.wraps, which
    # a type checker cannot bind as a method (the call still runs PreTrainedModel.to, which returns model)
    module: torch.nn.Module = model
    module.to(device)
    checkpointing = config.gradient_checkpointing
    if checkpointing == "auto":
        checkpointing = device.type == "cuda"
    if checkpointing:
        enable_checkpointing(model)
    use_float32_head(model, config, device)
    model.config.use_cache = True
    return model, tokenizer


def enable_checkpointing(model: Any) -> None:
    """Activation (gradient) checkpointing, non-reentrant; transformers 5 renamed the method."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def return_freed_memory_to_the_os() -> None:
    """On glibc, serve every allocation over 1 MiB with mmap, so freed tensors go back to the OS.

    glibc's default raises its mmap threshold after large frees, after which activation-sized
    tensors come from the heap and freed ones stay in the process: a CPU training process then
    holds about twice the memory it uses. A user-set ``MALLOC_MMAP_THRESHOLD_`` is left alone.
    """
    import ctypes
    import os
    import sys

    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # not glibc (e.g. musl): nothing to tune
        return


@dataclass
class MicroBatch:
    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    response_ids: Tensor
    response_mask: Tensor
    """1 on trained response tokens (sampled by the policy), 0 on env/template tokens and padding."""
    advantages: Tensor
    sequences: list[TrainSequence]


def collate(sequences: list[TrainSequence], pad_id: int, device: torch.device) -> MicroBatch:
    """Pack sequences in the left-padded-prompt / right-padded-response layout."""
    p = max(len(s.prompt_ids) for s in sequences)
    r = max(max(len(s.response_ids) for s in sequences), 1)
    ids, attn, resp, rmask = [], [], [], []
    for s in sequences:
        lp, lr = len(s.prompt_ids), len(s.response_ids)
        ids.append([pad_id] * (p - lp) + s.prompt_ids + s.response_ids + [pad_id] * (r - lr))
        attn.append([0] * (p - lp) + [1] * (lp + lr) + [0] * (r - lr))
        resp.append(s.response_ids + [pad_id] * (r - lr))
        rmask.append(list(s.loss_mask or [1] * lr) + [0] * (r - lr))
    attention_mask = torch.tensor(attn, dtype=torch.long, device=device)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return MicroBatch(
        input_ids=torch.tensor(ids, dtype=torch.long, device=device),
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_ids=torch.tensor(resp, dtype=torch.long, device=device),
        response_mask=torch.tensor(rmask, dtype=torch.float32, device=device),
        advantages=torch.tensor([s.advantage for s in sequences], dtype=torch.float32, device=device),
        sequences=sequences,
    )


def accepts_logits_to_keep(model: Any) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def response_logits(model: Any, mb: MicroBatch) -> Tensor:
    """Logits ``[B, R, V]`` that predict each response token.

    When several sequences share a prompt (the G rollouts of a group), the prompt runs once and
    its KV cache is shared by the responses (gradients flow back through it), unless activation
    checkpointing is on (transformers then disables the cache while training).
    """
    unique = {tuple(s.prompt_ids) for s in mb.sequences}
    checkpointing = is_checkpointing(model) and model.training
    if len(unique) < len(mb.sequences) and not checkpointing:
        logits = _shared_prompt_logits(model, mb)
        if logits is not None:
            return logits
    return _full_logits(model, mb)


def _full_logits(model: Any, mb: MicroBatch) -> Tensor:
    r = mb.response_ids.shape[1]
    kwargs: dict[str, Any] = {"use_cache": False}
    if accepts_logits_to_keep(model):
        kwargs["logits_to_keep"] = r + 1
    out = model(
        input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=mb.position_ids, **kwargs
    )
    logits = out.logits[:, -(r + 1) : -1, :]
    return logits


def is_checkpointing(model: Any) -> bool:
    """Whether activation checkpointing is on (transformers 5 renamed the property)."""
    name = (
        "is_activation_checkpointing"
        if hasattr(type(model), "is_activation_checkpointing")
        else "is_gradient_checkpointing"
    )
    return bool(getattr(model, name, False))


def _output_cache(out: Any) -> Any:
    for name in ("cache", "past_key_values"):
        if name in out:
            return out[name]
    return None


def _shared_prompt_logits(model: Any, mb: MicroBatch) -> Tensor | None:
    """Prompt forward once per distinct prompt, then every response on a copy of its prompt's cache."""
    device = mb.input_ids.device
    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(s.prompt_ids), len(index)) for s in mb.sequences]
    pad = int(mb.input_ids[0, 0]) if mb.attention_mask[0, 0] == 0 else 0
    ids, attn = (t.to(device) for t in left_pad([list(x) for x in index], pad))
    kwargs: dict[str, Any] = {"logits_to_keep": 1} if accepts_logits_to_keep(model) else {}
    out = model(
        input_ids=ids,
        attention_mask=attn,
        position_ids=(attn.cumsum(-1) - 1).clamp(min=0),
        use_cache=True,
        **kwargs,
    )
    cache = _output_cache(out)
    if cache is None or not hasattr(cache, "reorder_cache"):
        return None
    select = torch.tensor(rows, device=device)
    first = out.logits[:, -1:, :].index_select(0, select)  # predicts each response's first token
    r = mb.response_ids.shape[1]
    if r == 1:
        return first
    cache.reorder_cache(select)
    resp_attn = mb.attention_mask[:, -r:][
        :, : r - 1
    ]  # padding mask of the responses: env tokens stay visible
    lengths = attn.sum(-1).index_select(0, select)
    positions = lengths.unsqueeze(-1) + torch.arange(r - 1, device=device)
    rest = model(
        input_ids=mb.response_ids[:, : r - 1],
        attention_mask=torch.cat([attn.index_select(0, select), resp_attn], dim=-1),
        position_ids=positions,
        use_cache=True,
        **{cache_keyword(model): cache},
    ).logits
    return torch.cat([first, rest], dim=1)


CHUNK_ELEMENTS = 1 << 24
"""Logits are reduced this many elements (64 MiB in float32) at a time, to bound the peak memory."""


def _row_chunks(logits: Tensor) -> int:
    return max(1, CHUNK_ELEMENTS // max(logits.shape[1] * logits.shape[2], 1))


def token_logprobs(logits: Tensor, tokens: Tensor, entropy: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """``log softmax(logits)[token]`` in float32, a few rows at a time (no full-size float copies).

    With ``entropy=True`` also returns the per-token entropy of the distribution (a metric, no
    gradient), computed from the same log-normaliser.
    """
    rows = _row_chunks(logits)
    logps, entropies = [], []
    for chunk, picked_ids in zip(logits.split(rows), tokens.split(rows), strict=True):
        chunk = chunk.float()
        logz = torch.logsumexp(chunk, dim=-1)
        logps.append(torch.gather(chunk, -1, picked_ids.unsqueeze(-1)).squeeze(-1) - logz)
        if entropy:
            with torch.no_grad():
                c, z = chunk.detach(), logz.detach()
                entropies.append(z - (torch.exp(c - z.unsqueeze(-1)) * c).sum(-1))
    logp = torch.cat(logps)
    return (logp, torch.cat(entropies)) if entropy else logp


def micro_batches(
    sequences: Sequence[TrainSequence], size: int | None, max_tokens: int | None = None
) -> list[list[int]]:
    """The indices of each micro-batch: sequences of similar lengths together (less padding), deterministic.

    A micro-batch holds at most ``size`` sequences and at most ``max_tokens`` padded tokens (its count
    times its longest prompt plus its longest response; one longer sequence gets one of its own)."""
    order = sorted(
        range(len(sequences)),
        key=lambda i: (len(sequences[i].prompt_ids) + len(sequences[i].response_ids), i),
    )
    parts: list[list[int]] = []
    part: list[int] = []
    prompt = response = 0
    for i in order:
        p, r = max(prompt, len(sequences[i].prompt_ids)), max(response, len(sequences[i].response_ids), 1)
        full = (size is not None and len(part) >= size) or (
            max_tokens is not None and (len(part) + 1) * (p + r) > max_tokens
        )
        if part and full:
            parts.append(part)
            part, p, r = [], len(sequences[i].prompt_ids), max(len(sequences[i].response_ids), 1)
        part.append(i)
        prompt, response = p, r
    return [*parts, part] if part else parts
