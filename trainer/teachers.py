"""MOPD domain teachers: per-token log-probs of the student's sampled tokens under each example's teacher.

``TeacherPool`` maps each env id to a teacher (``mopd.teachers`` / ``mopd.default_teacher``), loads
every distinct checkpoint once (env ids sharing a folder share one frozen model, in eval mode, on
the trainer's device) and, each step, groups the batch's sequences by teacher so that each teacher
scores all of its sequences in one call (micro-batched like the policy: ``collate``,
``response_logits``, ``token_logprobs``, logits divided by the sampling temperature). The results go
on each ``TrainSequence`` (``teacher_logprobs``, ``teacher_top1``) and ``collate`` pads them into
``MicroBatch.teacher_logp``, so the loop hands them to the loss like any other log-prob source.

Scorers follow the ``TeacherScorer`` protocol: a transformers forward pass (``HFTeacher``,
``mopd.teacher_engine: hf``) or vLLM prompt logprobs (``VLLMTeacher`` in ``vllm_teacher``,
``teacher_engine: vllm``: one ``generate`` call per teacher per step, raw T = 1 distribution).

Teachers must share the student's tokenizer (teachers are earlier checkpoints of the same model,
RECIPE.md §MOPD): a teacher whose vocabulary differs is a ``ConfigError`` naming it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..core import CascadeError
from .batch import TrainSequence
from .config import Config, ConfigError, ModelConfig, mopd_teacher_paths
from .model import collate, load_model, micro_batches, model_path, response_logits, token_logprobs


@dataclass
class TeacherScores:
    """One sequence's teacher scores, one entry per response token."""

    logprobs: list[float]
    top1: list[bool]


class TeacherScorer(Protocol):
    """Scores sampled response tokens under one teacher (``HFTeacher``, ``VLLMTeacher``)."""

    name: str

    def score(self, sequences: list[TrainSequence]) -> list[TeacherScores]:
        """Per-token log-probs of each sequence's response tokens, and top-1 agreement."""
        ...


class HFTeacher:
    """A frozen transformers model scoring response tokens with a forward pass (no gradient)."""

    def __init__(self, name: str, model: Any, *, pad_id: int, micro_batch_size: int, temperature: float = 1.0):
        self.name = name
        self.model = model.eval().requires_grad_(False)
        self.pad_id = pad_id
        self.micro_batch_size = micro_batch_size
        self.temperature = temperature if temperature > 0 else 1.0
        self.device = next(model.parameters()).device

    @torch.no_grad()
    def score(self, sequences: list[TrainSequence]) -> list[TeacherScores]:
        index = {id(s): i for i, s in enumerate(sequences)}
        out: list[TeacherScores | None] = [None] * len(sequences)
        for part in micro_batches(sequences, self.micro_batch_size):
            mb = collate(part, self.pad_id, self.device)
            logits = response_logits(self.model, mb)
            if self.temperature != 1.0:
                logits = logits / self.temperature
            logp = token_logprobs(logits, mb.response_ids)
            assert isinstance(logp, torch.Tensor)
            top1 = logits.argmax(dim=-1) == mb.response_ids
            for row, seq in enumerate(part):
                n = len(seq.response_ids)
                out[index[id(seq)]] = TeacherScores(logp[row, :n].tolist(), top1[row, :n].tolist())
        return [s if s is not None else TeacherScores([], []) for s in out]


def teacher_dtype(name: str, device: torch.device) -> str:
    """``mopd.teacher_dtype`` for ``load_model`` (``auto``: bfloat16 on GPU, float32 on CPU)."""
    if name == "auto":
        return "bfloat16" if device.type == "cuda" else "float32"
    return name


def check_same_vocabulary(name: str, t_size: int, teacher_tokenizer: Any, student: Any, student_tokenizer: Any) -> None:
    """``ConfigError`` naming the teacher unless it shares the student's tokenizer and output vocabulary
    (``t_size``: the teacher's output vocabulary size)."""
    s_size = student.get_output_embeddings().weight.shape[0]
    if t_size != s_size:
        raise ConfigError(f"{name}: the teacher's vocabulary has {t_size} entries, the student's {s_size}; "
                          "MOPD teachers must share the student's tokenizer")
    tokenizers = (teacher_tokenizer, student_tokenizer)
    if None not in tokenizers and teacher_tokenizer.get_vocab() != student_tokenizer.get_vocab():
        raise ConfigError(f"{name}: the teacher's tokenizer differs from the student's; "
                          "MOPD teachers must share the student's tokenizer")


class TeacherPool:
    """The step's teacher scoring, grouped by teacher; see the module docstring.

    ``scorers`` maps a teacher key (its folder) to its scorer, ``assignment`` each env id to a key.
    ``from_config`` loads them from ``mopd:``.
    """

    def __init__(self, scorers: Mapping[str, TeacherScorer], assignment: Mapping[str, str]):
        unknown = sorted(set(assignment.values()) - set(scorers))
        if unknown:
            raise ConfigError(f"mopd.teachers: no scorer for teacher(s) {', '.join(unknown)}")
        self.scorers = dict(scorers)
        self.assignment = dict(assignment)

    @classmethod
    def from_config(cls, config: Config, student: Any, student_tokenizer: Any, pad_id: int) -> TeacherPool:
        """Load each distinct teacher folder once (``mopd.teacher_engine``), check its vocabulary."""
        device = next(student.parameters()).device
        dtype = teacher_dtype(config.mopd.teacher_dtype, device)
        paths = mopd_teacher_paths(config)
        scorers: dict[str, TeacherScorer] = {}
        assignment: dict[str, str] = {}
        for env_id, path in paths.items():
            folder = str(model_path(path).resolve())
            assignment[env_id] = folder
            if folder in scorers:
                continue
            where = (f"mopd.teachers.{env_id}" if env_id in config.mopd.teachers else "mopd.default_teacher")
            if config.mopd.teacher_engine == "vllm":
                from .vllm_teacher import VLLMTeacher

                kwargs = {"dtype": dtype, **config.mopd.teacher_engine_kwargs}
                scorer = VLLMTeacher(where, folder, temperature=config.rollout.temperature, **kwargs)
                check_same_vocabulary(f"{where} ({path})", scorer.vocab_size, scorer.tokenizer(), student,
                                      student_tokenizer)
                scorers[folder] = scorer
                continue
            model_config = ModelConfig(path=path, dtype=dtype, device=str(device), gradient_checkpointing=False)
            model, tokenizer = load_model(model_config)
            check_same_vocabulary(f"{where} ({path})", model.get_output_embeddings().weight.shape[0], tokenizer,
                                  student, student_tokenizer)
            scorers[folder] = HFTeacher(where, model, pad_id=pad_id, micro_batch_size=config.optim.micro_batch_size,
                                        temperature=config.rollout.temperature)
        return cls(scorers, assignment)

    def teacher_of(self, env_id: str) -> str:
        if env_id not in self.assignment:
            raise ConfigError(f"mopd.teachers has no teacher for env {env_id}")
        return self.assignment[env_id]

    def score(self, sequences: list[TrainSequence]) -> dict[str, float]:
        """Fill ``teacher_logprobs``/``teacher_top1`` of every sequence, one scorer call per teacher."""
        start = time.perf_counter()
        groups: dict[str, list[TrainSequence]] = {}
        for seq in sequences:
            groups.setdefault(self.teacher_of(seq.env_id), []).append(seq)
        for key, members in groups.items():
            for seq, scores in zip(members, self.scorers[key].score(members), strict=True):
                if len(scores.logprobs) != len(seq.response_ids):
                    raise CascadeError(f"teacher {key} scored {len(scores.logprobs)} of {len(seq.response_ids)} tokens")
                seq.teacher_logprobs, seq.teacher_top1 = scores.logprobs, scores.top1
        return {"time/teacher_s": time.perf_counter() - start, "mopd/teachers_used": float(len(groups))}
