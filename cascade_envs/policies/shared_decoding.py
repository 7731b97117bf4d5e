"""Batched decoding that prefills each distinct prompt once and drops finished rows.

A GRPO step asks for G samples of each prompt. ``model.generate`` on the G-times-repeated prompts
(what TRL does) prefills every copy and keeps decoding rows that have already ended. Here:

- each distinct prompt is prefilled once (left-padded with the other distinct prompts), and its
  KV cache is copied to the rows that sample from it: a group of 8 pays one prefill, not 8;
- rows that end (EOS, a stop string, their own ``max_tokens``) leave the batch: their cache rows
  are dropped once enough have ended to pay for the copy, so the batch shrinks as answers finish.

Sampling, logprobs and stop semantics are ``decoding.py``'s (``RowSampler``, ``RowEnds``,
``completion``), so a request gets the same kind of result from either path. The loop drives the
model directly with a ``DynamicCache``, so it applies only to plain decoder-only transformers
whose cache is one key/value tensor pair per layer (``supports_shared_decoding``); every other
architecture goes through ``model.generate``.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from ..core import Completion
from .decoding import Decode, GenRequest, RowEnds, RowSampler, completion, left_pad

# Decoder-only architectures whose DynamicCache holds full-attention key/value tensors only, so
# rows can be selected and copied along the batch dimension.
SHARED_DECODING_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "phi3", "granite"})

# Ended rows are dropped from the cache once they are at least this share of the batch: copying
# the cache costs about as much as a few decoding steps of the rows it removes.
COMPACT_SHARE = 0.125


def supports_shared_decoding(model: object) -> bool:
    """Whether ``generate_shared`` can drive ``model`` (a known plain-attention decoder-only type)."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in SHARED_DECODING_MODEL_TYPES:
        return False
    layer_types = getattr(config, "layer_types", None) or ()
    return all(kind == "full_attention" for kind in layer_types) and not getattr(
        config, "sliding_window", None
    )


def cache_keyword(model: object) -> str:
    """The forward argument that takes a KV cache: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    try:
        return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return "past_key_values"


def generate_shared(
    model, decode: Decode, requests: list[GenRequest], eos_ids: set[int], pad_id: int
) -> list[Completion]:
    """Complete every request; requests with identical prompts share one prefill."""
    device = model.device
    owner: dict[tuple[int, ...], int] = {}
    rows_prompt = [owner.setdefault(tuple(r.prompt_ids), len(owner)) for r in requests]
    input_ids, attention = left_pad([list(p) for p in owner], pad_id)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    sampler = RowSampler(requests, device)
    ends = RowEnds(requests, eos_ids, decode)
    generated: list[list[int]] = [[] for _ in requests]
    logprobs: list[list[float]] = [[] for _ in requests]
    cache = DynamicCache(config=model.config)
    cache_arg = {cache_keyword(model): cache}
    with torch.inference_mode():
        out = model(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            position_ids=positions.to(device),
            **cache_arg,
            use_cache=True,
            logits_to_keep=1,
        )
        index = torch.tensor(rows_prompt, device=device)
        cache.batch_select_indices(index)  # one cache row per request, copied from its prompt's
        logits = out.logits[:, -1][index]
        mask = attention.to(device)[index]
        next_position = positions.to(device)[index, -1] + 1
        live = list(range(len(requests)))  # requests still in the batch, in batch order
        steps = max(r.max_tokens for r in requests)
        for _ in range(steps):
            tokens, token_logprobs = sampler.draw(logits, live)
            for k, (i, token, lp) in enumerate(
                zip(live, tokens.tolist(), token_logprobs.tolist(), strict=True)
            ):
                if not ends.ended[i]:
                    generated[i].append(token)
                    logprobs[i].append(lp)
                    ends.update(i, generated[i])
                else:  # an ended row still in the batch until the next compaction
                    tokens[k] = pad_id
            keep = [k for k, i in enumerate(live) if not ends.ended[i]]
            if not keep:
                break
            if len(live) - len(keep) >= max(1, COMPACT_SHARE * len(live)):
                select = torch.tensor(keep, device=device)
                cache.batch_select_indices(select)
                tokens, mask, next_position = tokens[select], mask[select], next_position[select]
                live = [live[k] for k in keep]
            mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
            out = model(
                input_ids=tokens[:, None],
                attention_mask=mask,
                position_ids=next_position[:, None],
                **cache_arg,
                use_cache=True,
            )
            logits = out.logits[:, -1]
            next_position = next_position + 1
    return [
        completion(r, generated[i], logprobs[i], ends.stopped_at[i], eos_ids, decode)
        for i, r in enumerate(requests)
    ]
