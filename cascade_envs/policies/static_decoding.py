"""Decoding with a static KV cache, each step replayed as one CUDA graph on a GPU.

``shared_decoding.py`` drives the model step by step from Python with a growing cache and a
shrinking batch. On a GPU such a step is launch-bound: the model runs module by module, each
operation a kernel launch, while the GPU idles (measured ~24 ms per step at 0.5B on an H200).
Here every shape stays fixed, so one step can be captured as a CUDA graph and replayed:

- each distinct prompt is prefilled once (left-padded, as in ``shared_decoding``) and its keys and
  values are copied into buffers of ``prompt width + max_tokens`` positions for every row that
  samples from it (``StaticCache``);
- every row stays in the batch until all have ended (an ended row's input is padding and its
  output is ignored); the attention mask is a ``[rows, 1, 1, positions]`` boolean buffer opened one
  column per step, and the write position is a device tensor, so a step reads nothing from the host;
- on CUDA, after ``WARMUP_STEPS`` eager steps the step is captured once and replayed; if the capture
  fails (the model runs an operation a graph cannot hold), the remaining steps run eagerly on the
  same buffers and one warning says why. The tokens are the same either way.

Sampling, logprobs and stops are ``decoding.py``'s, as on the other paths. Masks are passed to the
model as 4D boolean tensors, so this applies to plain decoder-only models whose attention takes an
sdpa-style mask (``supports_static_decoding``).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor

from ..core import Completion
from .decoding import Decode, GenRequest, RowEnds, RowSampler, completion, left_pad
from .shared_decoding import cache_keyword, supports_shared_decoding

log = logging.getLogger("cascade_envs.policies")

WARMUP_STEPS = 2
"""Eager steps before the capture (CUDA initialises its libraries' state on first use, never inside a capture)."""


def supports_static_decoding(model: Any) -> bool:
    """Whether ``generate_static`` can drive ``model``: a shared-decoding architecture whose attention
    implementation takes sdpa's boolean masks."""
    if not supports_shared_decoding(model):
        return False
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    name = getattr(model.config, "_attn_implementation", None)
    return name is not None and ALL_MASK_ATTENTION_FUNCTIONS.get(name) is sdpa_mask


class StaticCache:
    """The cache the attention layers write to (their ``update`` call): during the prefill it keeps
    each layer's keys and values as given; after ``expand`` it writes each step's at ``position`` into
    fixed buffers and returns them whole (the mask hides the positions not written yet)."""

    def __init__(self) -> None:
        self.keys: dict[int, Tensor] = {}
        self.values: dict[int, Tensor] = {}
        self.position: Tensor | None = None

    def update(
        self, key: Tensor, value: Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[Tensor, Tensor]:
        if self.position is None:
            self.keys[layer_idx], self.values[layer_idx] = key, value
            return key, value
        self.keys[layer_idx].index_copy_(2, self.position, key)
        self.values[layer_idx].index_copy_(2, self.position, value)
        return self.keys[layer_idx], self.values[layer_idx]

    def expand(self, rows: Tensor, length: int) -> None:
        """One buffer row per entry of ``rows`` (a prompt index), ``length`` positions, the prompt's first."""
        width = 0
        for store in (self.keys, self.values):
            for layer, prefix in store.items():
                picked = prefix.index_select(0, rows)
                width = picked.shape[2]
                buffer = picked.new_zeros((picked.shape[0], picked.shape[1], length, picked.shape[3]))
                buffer[:, :, :width] = picked
                store[layer] = buffer
        self.position = torch.tensor([width], device=rows.device)


def prefill_mask(attention: Tensor) -> Tensor:
    """``[rows, 1, P, P]``: causal over the real tokens; a padding position sees itself only (no row
    of the mask is empty, so no NaN reaches the keys and values)."""
    width = attention.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=attention.device).tril()
    mask = causal[None] & attention.bool()[:, None, :]
    return (mask | torch.eye(width, dtype=torch.bool, device=attention.device))[:, None]


class _Stepper:
    """One decoding step on fixed buffers: the next tokens in, their logits out (eager or replayed)."""

    def __init__(self, model: Any, cache: StaticCache, mask: Tensor, positions: Tensor, graphs: bool):
        self.model, self.cache, self.mask, self.positions = model, cache, mask, positions
        self.tokens = torch.zeros_like(positions)
        self.keyword = cache_keyword(model)
        self.graphs = graphs
        self.graph: Any = None
        self.logits: Tensor | None = None
        self.eager_steps = 0

    def _step(self) -> Tensor:
        assert self.cache.position is not None
        self.mask.index_fill_(3, self.cache.position, True)
        out = self.model(
            input_ids=self.tokens,
            attention_mask=self.mask,
            position_ids=self.positions,
            use_cache=True,
            **{self.keyword: self.cache},
        )
        self.positions.add_(1)
        self.cache.position.add_(1)
        return out.logits[:, -1]

    def __call__(self, tokens: Tensor) -> Tensor:
        self.tokens.copy_(tokens[:, None])
        if self.graph is not None:
            self.graph.replay()
            assert self.logits is not None
            return self.logits
        if not self.graphs:
            return self._step()
        if self.eager_steps >= WARMUP_STEPS:
            self._capture()
            return self(tokens)
        self.eager_steps += 1
        # before a capture, steps run on a side stream, as torch's own warm-up does
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            logits = self._step()
        torch.cuda.current_stream().wait_stream(side)
        return logits

    def _capture(self) -> None:
        """Capture one step (once); on failure, later steps run eagerly."""
        self.graphs = False
        try:
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            # thread_local: the capture runs in a policy's worker thread; other threads may use CUDA
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.logits = self._step()
        except Exception as exc:  # any operation that cannot be captured; the eager step is the same
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            log.warning("static decoding: the CUDA graph capture failed, decoding eagerly (%s)", first)
            return
        self.graph = graph


def generate_static(
    model: Any,
    decode: Decode,
    requests: list[GenRequest],
    eos_ids: set[int],
    pad_id: int,
    graphs: bool | None = None,
) -> list[Completion]:
    """Complete every request on a static cache; requests with identical prompts share one prefill.
    ``graphs`` (default: on CUDA) replays each step as a CUDA graph."""
    device = model.device
    graphs = device.type == "cuda" if graphs is None else graphs
    owner: dict[tuple[int, ...], int] = {}
    rows_prompt = [owner.setdefault(tuple(r.prompt_ids), len(owner)) for r in requests]
    input_ids, attention = (t.to(device) for t in left_pad([list(p) for p in owner], pad_id))
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    steps = max(r.max_tokens for r in requests)
    sampler = RowSampler(requests, device)
    ends = RowEnds(requests, eos_ids, decode)
    generated: list[list[int]] = [[] for _ in requests]
    logprobs: list[list[float]] = [[] for _ in requests]
    cache = StaticCache()
    with torch.inference_mode():
        out = model(
            input_ids=input_ids,
            attention_mask=prefill_mask(attention),
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_keyword(model): cache},
        )
        index = torch.tensor(rows_prompt, device=device)
        width = input_ids.shape[1]
        cache.expand(index, width + steps)
        mask = torch.zeros((len(requests), 1, 1, width + steps), dtype=torch.bool, device=device)
        mask[:, 0, 0, :width] = attention.bool()[index]
        stepper = _Stepper(model, cache, mask, positions[index, -1:] + 1, graphs)
        logits = out.logits[:, -1][index]
        every = list(range(len(requests)))
        for _ in range(steps):
            tokens, token_logprobs = sampler.draw(logits, every)
            for i, (token, lp) in enumerate(zip(tokens.tolist(), token_logprobs.tolist(), strict=True)):
                if not ends.ended[i]:
                    generated[i].append(token)
                    logprobs[i].append(lp)
                    ends.update(i, generated[i])
            if all(ends.ended):
                break
            done = torch.tensor(ends.ended, device=device)
            logits = stepper(torch.where(done, torch.full_like(tokens, pad_id), tokens))
    return [
        completion(r, generated[i], logprobs[i], ends.stopped_at[i], eos_ids, decode)
        for i, r in enumerate(requests)
    ]
