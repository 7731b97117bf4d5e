"""One batched ``model.generate`` call for requests with their own sampling settings.

Each row of a batch keeps its own temperature, top-p, max_tokens, stop strings and seed, so
requests can be batched freely and a seeded request samples the same tokens whatever else shares
its batch (up to float noise from padding). Sampling happens in a logits processor with one
``torch.Generator`` per row; it hands ``generate`` a one-hot score row, so ``generate`` runs in
greedy mode and only drives the model and its cache (which keeps every architecture's cache
handling, hybrid and recurrent ones included, inside transformers).

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

from collections.abc import Callable
from dataclasses import dataclass
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


class _RowSampler(LogitsProcessor):
    """Draws each row's next token with its own settings and generator; records its logprob."""

    def __init__(self, requests: list[GenRequest], device: torch.device):
        temps = torch.tensor([r.temperature for r in requests], dtype=torch.float32, device=device)
        self.greedy = temps <= 0
        self.scale = torch.where(self.greedy, torch.ones_like(temps), temps)[:, None]
        self.top_p = torch.tensor([r.top_p for r in requests], dtype=torch.float32, device=device)[:, None]
        self.sample_rows = [i for i, r in enumerate(requests) if r.temperature > 0]
        self.nucleus = bool(((self.top_p < 1) & ~self.greedy[:, None]).any())
        self.sample_generators = []
        for i in self.sample_rows:
            g = torch.Generator(device=device)
            g.manual_seed(requests[i].seed)
            self.sample_generators.append(g)
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(scores.float() / self.scale, dim=-1)
        chosen = logp.argmax(dim=-1)
        if self.sample_rows:
            rows = logp[self.sample_rows].exp()
            chosen[self.sample_rows] = self._draw(self._nucleus(rows) if self.nucleus else rows)
        self.logprobs.append(logp.gather(1, chosen[:, None])[:, 0])
        onehot = torch.full_like(scores, float("-inf"))
        return onehot.scatter_(1, chosen[:, None], 0.0)

    def _draw(self, probs: torch.Tensor) -> torch.Tensor:
        """One token per sampling row (a row of ``probs``), each from the row's own generator."""
        return torch.cat(
            [torch.multinomial(row, 1, generator=g) for row, g in zip(probs, self.sample_generators, strict=True)]
        )

    def _nucleus(self, probs: torch.Tensor) -> torch.Tensor:
        """Zero every token outside each sampling row's top-p nucleus (the top token always stays)."""
        top_p = self.top_p[self.sample_rows]
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = ((sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p) & (top_p < 1)
        return probs.scatter(1, order, sorted_probs.masked_fill(outside, 0.0))


class _RowStops(StoppingCriteria):
    """Ends each row at its own max_tokens or stop strings; remembers where a stop string ended it."""

    def __init__(self, requests: list[GenRequest], prompt_len: int, eos_ids: set[int], decode: Decode):
        self.requests = requests
        self.prompt_len = prompt_len
        self.eos_ids = eos_ids
        self.decode = decode
        self.stopped_at: list[int | None] = [None] * len(requests)
        self.ended = [False] * len(requests)
        # Enough trailing tokens to hold the longest stop string even if some tokens decode to "".
        self.window = [2 * max((len(s) for s in r.stop), default=0) + 8 for r in requests]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.Tensor:
        n = input_ids.shape[1] - self.prompt_len
        last = input_ids[:, -1].tolist()
        for i, r in enumerate(self.requests):
            if self.ended[i]:
                continue
            if last[i] in self.eos_ids:
                self.ended[i] = True
            elif r.stop and self._hit_stop(input_ids[i], r.stop, self.window[i]):
                self.stopped_at[i], self.ended[i] = n, True
            elif n >= r.max_tokens:
                self.ended[i] = True
        return torch.tensor(self.ended, dtype=torch.bool, device=input_ids.device)

    def _hit_stop(self, row: torch.Tensor, stop: tuple[str, ...], window: int) -> bool:
        text = self.decode(row[max(self.prompt_len, row.shape[0] - window) :].tolist())
        return any(s in text for s in stop)


def generate_batch(
    model, decode: Decode, requests: list[GenRequest], eos_ids: set[int], pad_id: int
) -> list[Completion]:
    """Complete every request with one left-padded ``model.generate`` call."""
    device = model.device
    width = max(len(r.prompt_ids) for r in requests)
    input_ids = torch.full((len(requests), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(requests), width), dtype=torch.long)
    for i, r in enumerate(requests):
        input_ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids, dtype=torch.long)
        attention[i, width - len(r.prompt_ids) :] = 1
    sampler = _RowSampler(requests, device)
    stops = _RowStops(requests, width, eos_ids, decode)
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
        stopping_criteria=StoppingCriteriaList([stops]),
    )
    generated = sequences[:, width:].tolist()
    logprobs = torch.stack(sampler.logprobs, dim=1).tolist() if sampler.logprobs else [[] for _ in requests]
    return [
        _completion(r, generated[i], logprobs[i], stops.stopped_at[i], eos_ids, decode)
        for i, r in enumerate(requests)
    ]


def _completion(
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
