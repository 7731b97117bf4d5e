"""Log-prob sources: what another model, or the rollout engine, gave each sampled response token.

A loss strategy declares the sources its loss reads (``LossStrategy.sources``): ``reference`` (the
frozen model the run started from, for a KL term), ``inference`` (what the engine reported while
sampling) and ``teacher`` (each example's domain teacher, MOPD). They share one shape,
``LogprobSource``: once per step, before the optimizer's micro-batches, the loop asks each source for
the ``TokenScores`` of every sequence of the batch, then pads them into each micro-batch's
``SourceTensors`` (``source_tensors``). The sequences themselves are never changed.

- ``InferenceLogprobs``: the engine's log-probs carried on each ``TrainSequence`` (NaN where it gave none);
- ``HFScorer``: a frozen transformers model, micro-batched like the policy (``collate``,
  ``response_logits``, ``token_logprobs`` of ``logits / T``); the reference model is one that scores
  every env, and so is each MOPD teacher of ``mopd.teacher_engine: hf``;
- ``RoutedSource``: sends each sequence to its env's scorer, one ``score`` call per scorer per step
  (MOPD's teachers: ``teachers.load_teachers``; ``VLLMTeacher`` scores with vLLM prompt logprobs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

from ..core import CascadeError
from .config import BatchSize, ConfigError
from .layout import pass_size
from .model import collate, micro_batches, response_logits, token_logprobs
from .sequence import TokenScores, TrainSequence
from .strategies import SourceTensors

NAN = float("nan")


class LogprobSource(Protocol):
    """Scores the response tokens of a batch's sequences: one ``TokenScores`` per sequence, in order."""

    name: str

    def score(self, sequences: Sequence[TrainSequence]) -> list[TokenScores]: ...


class InferenceLogprobs:
    """The rollout engine's log-probs of the sampled tokens, as it reported them (NaN where it gave none)."""

    name = "inference"

    def score(self, sequences: Sequence[TrainSequence]) -> list[TokenScores]:
        out = []
        for seq in sequences:
            n = len(seq.response_ids)
            known = seq.logprobs is not None and len(seq.logprobs) == n
            out.append(TokenScores(list(seq.logprobs) if known and seq.logprobs is not None else [NAN] * n))
        return out


class HFScorer:
    """A frozen transformers model scoring response tokens with forward passes (no gradient).

    ``temperature`` divides the logits (the distribution the engine sampled from; 0 counts as 1),
    ``autocast`` wraps each forward pass, and ``top1`` also reports whether each token is the model's
    most likely one.
    """

    def __init__(
        self,
        name: str,
        model: Any,
        *,
        pad_id: int,
        micro_batch_size: BatchSize,
        temperature: float = 1.0,
        top1: bool = True,
        autocast: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    ) -> None:
        self.name = name
        self.model = model.eval().requires_grad_(False)
        self.pad_id = pad_id
        self.micro_batch_size = micro_batch_size
        self.temperature = temperature if temperature > 0 else 1.0
        self.top1 = top1
        self.autocast = autocast
        self.device = next(model.parameters()).device

    @torch.no_grad()
    def score(self, sequences: Sequence[TrainSequence]) -> list[TokenScores]:
        out: list[TokenScores] = [TokenScores([])] * len(sequences)
        size = pass_size("auto", self.micro_batch_size, self.model)
        for part in micro_batches(sequences, size.sequences, None if size.sequences else size.tokens):
            mb = collate([sequences[i] for i in part], self.pad_id, self.device)
            with self.autocast():
                logits = response_logits(self.model, mb)
            if self.temperature != 1.0:
                logits = logits / self.temperature
            logp = token_logprobs(logits, mb.response_ids)
            assert isinstance(logp, torch.Tensor)
            top1 = logits.argmax(dim=-1) == mb.response_ids if self.top1 else None
            for row, i in enumerate(part):
                n = len(sequences[i].response_ids)
                out[i] = TokenScores(
                    logp[row, :n].tolist(), top1[row, :n].tolist() if top1 is not None else None
                )
        return out


class RoutedSource:
    """A source that sends each sequence to the scorer of its env: ``scorers`` by key, ``assignment``
    maps each env id to a key. Each scorer is called once per step, with all of its sequences."""

    def __init__(
        self, name: str, scorers: Mapping[str, LogprobSource], assignment: Mapping[str, str]
    ) -> None:
        unknown = sorted(set(assignment.values()) - set(scorers))
        if unknown:
            raise ConfigError(f"{name}: no scorer for {', '.join(unknown)}")
        self.name = name
        self.scorers = dict(scorers)
        self.assignment = dict(assignment)

    def scorer_of(self, env_id: str) -> str:
        if env_id not in self.assignment:
            raise ConfigError(f"{self.name}: no scorer for env {env_id}")
        return self.assignment[env_id]

    def score(self, sequences: Sequence[TrainSequence]) -> list[TokenScores]:
        groups: dict[str, list[int]] = {}
        for i, seq in enumerate(sequences):
            groups.setdefault(self.scorer_of(seq.env_id), []).append(i)
        out: list[TokenScores] = [TokenScores([])] * len(sequences)
        for key, members in groups.items():
            scored = self.scorers[key].score([sequences[i] for i in members])
            for i, scores in zip(members, scored, strict=True):
                if len(scores.logprobs) != len(sequences[i].response_ids):
                    raise CascadeError(
                        f"{self.name} {key} scored {len(scores.logprobs)} of "
                        f"{len(sequences[i].response_ids)} tokens"
                    )
                out[i] = scores
        return out


def source_tensors(
    scores: Sequence[TokenScores], sequences: Sequence[TrainSequence], width: int, device: torch.device
) -> SourceTensors:
    """One source's scores of a micro-batch's sequences, padded to ``width`` response columns: the values
    on trained tokens, NaN elsewhere (``top1``: 1.0/0.0, and 0.0 elsewhere; ``None`` when no score has it)."""
    masks = [list(seq.loss_mask or ()) for seq in sequences]
    rows = [
        _padded(sc.logprobs, len(seq.response_ids), width, mask)
        for sc, seq, mask in zip(scores, sequences, masks, strict=True)
    ]
    top1 = None
    if any(sc.top1 is not None for sc in scores):
        flags = [[float(x) for x in sc.top1] if sc.top1 is not None else None for sc in scores]
        top1 = [
            [0.0 if v != v else v for v in _padded(flag, len(seq.response_ids), width, mask)]  # NaN -> 0
            for flag, seq, mask in zip(flags, sequences, masks, strict=True)
        ]
    return SourceTensors(
        torch.tensor(rows, dtype=torch.float32, device=device),
        torch.tensor(top1, dtype=torch.float32, device=device) if top1 is not None else None,
    )


def _padded(values: Sequence[float] | None, length: int, width: int, mask: Sequence[int]) -> list[float]:
    """One row: ``values`` where valid and masked in, NaN elsewhere (missing or wrong-length values too)."""
    row = values if values is not None and len(values) == length else [NAN] * length
    return [float(v) if m else NAN for v, m in zip(row, mask, strict=False)] + [NAN] * (width - length)
