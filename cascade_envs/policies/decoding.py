"""Per-row sampling and stopping for batched generation, and the ``model.generate`` path.

Each row of a batch keeps its own temperature, top-p, max_tokens, stop strings and seed, so
requests can be batched freely and a seeded request samples the same tokens whatever else shares
its batch (up to float noise from padding). ``RowSampler`` draws each row's token by inverting
its CDF at one uniform from the row's own ``torch.Generator``; ``RowEnds`` decides when a row
ends. Both decoding paths use them: ``shared_decoding.py`` (our own loop) and ``generate_batch``
here, where the sampler sits in a logits processor that hands ``generate`` a one-hot score row,
so ``generate`` runs in greedy mode and only drives the model and its cache (which keeps every
architecture's cache handling, hybrid and recurrent ones included, inside transformers).

Logprobs: for every sampled token, ``log_softmax(logits / T)`` over the full vocabulary at the
row's temperature ``T`` (``T = 1`` for greedy rows). This is what a trainer computes from the same
logits at the same temperature, so on-policy importance ratios are exactly 1. Top-p truncation
shapes which token is drawn but is not renormalised into the reported logprob.

Token ids include the token that ended generation (EOS, or the token that completed a stop string);
the text leaves out the EOS token and everything from the stop string on (OpenAI semantics).
EOS means every end-of-sequence token of the model and tokenizer (``end_token_ids``): chat models
often declare one (``<|im_end|>``) but also end with another (``<|endoftext|>``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from ..core import Completion
from ..policy import PolicyError

Decode = Callable[[list[int]], str]
"""Token ids to text, special tokens kept (a thread-safe wrapper around the tokenizer)."""


# Special tokens that end a sequence in the common chat and base vocabularies. A tokenizer's token
# counts only when it is one of its special tokens, so a plain-text "</s>" never ends anything.
END_OF_SEQUENCE_TOKENS = (
    "<|endoftext|>",  # GPT-2/SmolLM/Qwen document end
    "<|im_end|>",  # ChatML turn end
    "<|end_of_text|>",  # Llama 3 document end
    "<|eot_id|>",  # Llama 3 turn end
    "<|eom_id|>",  # Llama 3 tool-call turn end
    "<end_of_turn>",  # Gemma turn end
    "<|end|>",  # Phi-3 turn end
    "<eos>",  # Gemma document end
    "</s>",  # Llama 2 / Mistral document end
)


def end_token_ids(model: object, tokenizer: Any) -> set[int]:
    """Every id that ends generation: the model's generation config and config EOS ids, the
    tokenizer's EOS token, and each of the tokenizer's special tokens in ``END_OF_SEQUENCE_TOKENS``."""
    ids: set[int] = set()
    for config in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        declared = getattr(config, "eos_token_id", None)
        if isinstance(declared, int):
            ids.add(declared)
        elif isinstance(declared, (list, tuple)):
            ids.update(int(i) for i in declared)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    special = set(getattr(tokenizer, "all_special_tokens", ()))
    for added in getattr(tokenizer, "added_tokens_decoder", {}).values():
        if getattr(added, "special", False):
            special.add(str(added))
    for token in special.intersection(END_OF_SEQUENCE_TOKENS):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and tokenizer.convert_ids_to_tokens(token_id) == token:
            ids.add(token_id)
    return ids


@dataclass
class GenRequest:
    """One prompt to complete, already tokenised."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    stop: tuple[str, ...] = ()
    abandoned: threading.Event = field(default_factory=threading.Event)
    """Set when the caller stopped waiting (a timeout, a cancel): the row ends at its next token."""


class RowSampler:
    """Draws each row's next token with its own settings and generator (one per sampling row).

    ``draw(logits, rows)`` takes the logits of the rows still generating (``rows``: their indices
    into ``requests``) and returns their tokens and logprobs; a row draws the same token whatever
    else shares its batch.
    """

    def __init__(self, requests: list[GenRequest], device: torch.device):
        temps = torch.tensor([r.temperature for r in requests], dtype=torch.float32, device=device)
        self.greedy = temps <= 0
        self.scale = torch.where(self.greedy, torch.ones_like(temps), temps)[:, None]
        self.top_p = torch.tensor([r.top_p for r in requests], dtype=torch.float32, device=device)[:, None]
        # the same settings on the host, so choosing a path never reads from the device
        self.unit_scale = [r.temperature <= 0 or r.temperature == 1 for r in requests]
        self.nucleus = [r.top_p < 1 for r in requests]
        # CPU generators on every device: a GPU row then draws its uniform on the host (one copy for
        # the whole batch instead of one kernel launch per row)
        self.generators: list[torch.Generator | None] = []
        for r in requests:
            g = None
            if r.temperature > 0:
                g = torch.Generator()
                g.manual_seed(r.seed)
            self.generators.append(g)

    def draw(self, logits: torch.Tensor, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens, logprobs) of ``rows`` from their ``logits`` (one row of logits per entry of ``rows``).

        Few passes over the vocabulary (on CPU each costs as much as the arithmetic): the row
        maxima, the unnormalised probabilities, their block sums. The logprob of the chosen token
        is ``logit / T - logsumexp(logits / T)``, what ``log_softmax`` gives.
        """
        index = torch.tensor(rows, device=logits.device)
        unit = all(self.unit_scale[row] for row in rows)
        scaled = logits.float() if unit else logits.float() / self.scale[index]
        peak = scaled.amax(dim=-1, keepdim=True)  # NaN if any logit is NaN
        if not bool(torch.isfinite(peak).all()):
            raise PolicyError("the model produced NaN or all -inf logits")
        weights = (scaled - peak).exp_()  # unnormalised probabilities, the largest exactly 1
        blocks = _BlockSums(weights)
        chosen = torch.empty(len(rows), dtype=torch.long, device=logits.device)
        sampling = [k for k, row in enumerate(rows) if self.generators[row] is not None]
        greedy = [k for k, row in enumerate(rows) if self.generators[row] is None]
        if greedy:
            chosen[greedy] = scaled[greedy].argmax(dim=-1)
        if sampling:
            uniform = torch.cat([torch.rand(1, generator=self.generators[rows[k]]) for k in sampling])
            uniform = uniform.to(logits.device)
            if any(self.nucleus[rows[k]] for k in sampling):
                top_p = self.top_p[index[sampling]]
                pick = weights[sampling]
                chosen[sampling] = _BlockSums(_nucleus(pick / pick.sum(dim=-1, keepdim=True), top_p)).draw(
                    uniform
                )
            else:
                chosen[sampling] = blocks.draw(uniform, sampling if greedy else None)
        log_total = blocks.total().log().float()[:, None]
        logprobs = (scaled.gather(1, chosen[:, None]) - peak - log_total)[:, 0]
        return chosen, logprobs


class _BlockSums:
    """Rows of non-negative weights summed in blocks of 256 tokens, to draw tokens by inverting
    the CDF in two levels: the block holding the target, then the token inside it.

    Only block sums (one pass) and one block per drawn row are accumulated, so a draw costs a
    fraction of a ``torch.multinomial`` call per row (measured 2.2 ms per 49k-token row). Searches
    are strict and clamped to entries of positive weight: a token of weight 0 is never drawn.
    """

    SIZE = 256

    def __init__(self, weights: torch.Tensor):
        self.weights = weights
        full = weights.shape[1] - weights.shape[1] % self.SIZE
        mass = [weights[:, :full].unflatten(1, (-1, self.SIZE)).sum(dim=-1)] if full else []
        if full < weights.shape[1]:
            mass.append(weights[:, full:].sum(dim=-1, keepdim=True))
        self.mass = torch.cat(mass, dim=1).double()
        self.end = self.mass.cumsum(dim=-1)

    def total(self) -> torch.Tensor:
        return self.end[:, -1]

    def draw(self, uniform: torch.Tensor, rows: list[int] | None = None) -> torch.Tensor:
        """One token for each of ``rows`` (all rows when None), at ``uniform`` (one per row) of the CDF."""
        device = self.mass.device
        index = (
            torch.arange(self.mass.shape[0], device=device)
            if rows is None
            else torch.tensor(rows, device=device)
        )
        mass, end = self.mass[index], self.end[index]
        target = uniform.double()[:, None] * end[:, -1:]
        block = _clamp_to_positive(torch.searchsorted(end, target, right=True)[:, 0], mass)
        start = block * self.SIZE
        # each drawn row's block, the last one zero-padded where the vocabulary ends
        columns = start[:, None] + torch.arange(self.SIZE, device=device)
        vocab = self.weights.shape[1]
        picked = self.weights[index[:, None], columns.clamp(max=vocab - 1)]
        inside = torch.where(
            columns < vocab, picked, torch.zeros((), dtype=picked.dtype, device=device)
        ).double()
        before = end.gather(1, block[:, None]) - mass.gather(1, block[:, None])
        token = torch.searchsorted(inside.cumsum(dim=-1), target - before, right=True)[:, 0]
        return start + _clamp_to_positive(token, inside)


def _clamp_to_positive(index: torch.Tensor, mass: torch.Tensor) -> torch.Tensor:
    """``index`` moved inside the row's first and last entries of positive ``mass`` (float
    rounding can put a search one step past either end)."""
    positions = torch.arange(mass.shape[1], device=mass.device)
    positive = mass > 0
    first = torch.where(positive, positions, mass.shape[1]).amin(dim=-1)
    last = torch.where(positive, positions, -1).amax(dim=-1)
    return torch.maximum(torch.minimum(index, last), first)


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero every token outside each row's top-p nucleus (the top token always stays)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = ((sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p) & (top_p < 1)
    return probs.scatter(1, order, sorted_probs.masked_fill(outside, 0.0))


class RowEnds:
    """Decides when each row ends: an EOS token, one of its stop strings, its max_tokens, or its
    caller gone (``GenRequest.abandoned``).

    ``update(i, generated)`` is called after each token a row draws; it returns whether the row has
    ended and remembers, in ``stopped_at``, where a stop string ended it.
    """

    def __init__(self, requests: list[GenRequest], eos_ids: set[int], decode: Decode):
        self.requests = requests
        self.eos_ids = eos_ids
        self.decode = decode
        self.stopped_at: list[int | None] = [None] * len(requests)
        self.ended = [False] * len(requests)
        # Enough trailing tokens to hold the longest stop string even if some tokens decode to "".
        self.window = [2 * max((len(s) for s in r.stop), default=0) + 8 for r in requests]

    def update(self, i: int, generated: list[int]) -> bool:
        if self.ended[i]:
            return True
        r = self.requests[i]
        if generated[-1] in self.eos_ids or r.abandoned.is_set():
            self.ended[i] = True
        elif r.stop and any(s in self.decode(generated[-self.window[i] :]) for s in r.stop):
            self.stopped_at[i], self.ended[i] = len(generated), True
        elif len(generated) >= r.max_tokens:
            self.ended[i] = True
        return self.ended[i]


class _GenerateSampler(LogitsProcessor):
    """``RowSampler`` inside ``model.generate``: hands back a one-hot score row per batch row."""

    def __init__(self, sampler: RowSampler, size: int):
        self.sampler = sampler
        self.rows = list(range(size))
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        chosen, logprobs = self.sampler.draw(scores, self.rows)
        self.logprobs.append(logprobs)
        onehot = torch.full_like(scores, float("-inf"))
        return onehot.scatter_(1, chosen[:, None], 0.0)


class _GenerateStops(StoppingCriteria):
    """``RowEnds`` inside ``model.generate``."""

    def __init__(self, ends: RowEnds, prompt_len: int):
        self.ends = ends
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.Tensor:
        rows = input_ids[:, self.prompt_len :].tolist()
        ended = [self.ends.update(i, row) for i, row in enumerate(rows)]
        return torch.tensor(ended, dtype=torch.bool, device=input_ids.device)


def generate_batch(
    model, decode: Decode, requests: list[GenRequest], eos_ids: set[int], pad_id: int
) -> list[Completion]:
    """Complete every request with one left-padded ``model.generate`` call."""
    device = model.device
    input_ids, attention = left_pad([r.prompt_ids for r in requests], pad_id)
    width = input_ids.shape[1]
    sampler = _GenerateSampler(RowSampler(requests, device), len(requests))
    ends = RowEnds(requests, eos_ids, decode)
    config = GenerationConfig(
        max_new_tokens=max(r.max_tokens for r in requests),
        do_sample=False,
        num_beams=1,
        # Neutral values, so the model's own generation_config (merged in for unset fields) does not
        # reshape the logits; sampling warpers are inactive anyway, since do_sample is False.
        min_new_tokens=0,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        remove_invalid_values=False,
        eos_token_id=sorted(eos_ids) or None,
        pad_token_id=pad_id,
    )
    sequences = model.generate(
        input_ids=input_ids.to(device),
        attention_mask=attention.to(device),
        generation_config=config,
        logits_processor=LogitsProcessorList([sampler]),
        stopping_criteria=StoppingCriteriaList([_GenerateStops(ends, width)]),
    )
    generated = sequences[:, width:].tolist()
    logprobs = torch.stack(sampler.logprobs, dim=1).tolist() if sampler.logprobs else [[] for _ in requests]
    return [
        completion(r, generated[i], logprobs[i], ends.stopped_at[i], eos_ids, decode)
        for i, r in enumerate(requests)
    ]


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts as one left-padded batch: (input ids, attention mask), both int64."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        attention[i, width - len(p) :] = 1
    return input_ids, attention


def completion(
    request: GenRequest,
    tokens: list[int],
    logprobs: list[float],
    stopped_at: int | None,
    eos_ids: set[int],
    decode: Decode,
) -> Completion:
    """Cut one row at its first ending event and decode it."""
    end, reason = min(len(tokens), request.max_tokens), "length"
    eos_at = next((j for j, t in enumerate(tokens[:end]) if t in eos_ids), None)
    if eos_at is not None:
        end, reason = eos_at + 1, "stop"
    if stopped_at is not None and stopped_at <= end:
        end, reason, eos_at = stopped_at, "stop", None
    kept = tokens[:end]
    text = decode(kept[:eos_at] if eos_at is not None else kept)
    if stopped_at is not None and eos_at is None and reason == "stop":
        cut = min((k for k in (text.find(s) for s in request.stop) if k >= 0), default=len(text))
        text = text[:cut]
    return Completion(
        text,
        finish_reason=reason,
        token_ids=kept,
        logprobs=[float(x) for x in logprobs[:end]],
        prompt_token_ids=list(request.prompt_ids),
    )
