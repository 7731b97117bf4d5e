"""MOPD teachers, every rule in one place: which teacher each env gets, what a teacher may be, how a
pipeline picks one, and how they are loaded.

- ``teacher_refs``: ``{mix env id: teacher}`` from ``mopd.teachers``, else ``mopd.default_teacher``;
  the one function behind a run's teachers and a pipeline stage's;
- ``check_teachers``: a run can train with them (every mix env has one, each is a model folder,
  ``auto`` is left to a pipeline, vLLM teachers need temperature 0 or 1);
- ``choose_teachers``: a pipeline resolves ``auto`` (the evaluated checkpoint with the best score on
  that env, ties to the later one), ``start`` and earlier stages' names into folders;
- ``load_teachers``: the ``teacher`` log-prob source (``sources.RoutedSource``): each distinct folder
  loaded once, frozen, on the trainer's device, as an ``HFScorer`` (``mopd.teacher_engine: hf``) or a
  ``VLLMTeacher`` (``vllm``), in this process or in a shared Ray actor (``mopd.teacher_placement: ray``,
  ``RayTeacher``), and refused unless it shares the student's tokenizer (teachers are
  earlier checkpoints of the same model, RECIPE.md §MOPD).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ..core import CascadeError
from .config import BatchSize, ConfigError, ModelConfig, MOPDConfig, WeightDtype, model_path
from .model import load_model
from .sources import HFScorer, LogprobSource, RoutedSource
from .vllm_teacher import GREEDY_TEMPERATURES, VLLMTeacher

AUTO = "auto"
"""A teacher a pipeline picks by score."""


def teacher_refs(mopd: MOPDConfig, env_ids: Iterable[str]) -> dict[str, str]:
    """``{env id: teacher}`` for each of ``env_ids`` that ``mopd.teachers`` or ``mopd.default_teacher`` gives one."""
    refs = {env_id: mopd.teachers.get(env_id, mopd.default_teacher) for env_id in env_ids}
    return {env_id: str(ref) for env_id, ref in refs.items() if ref is not None}


def _where(mopd: MOPDConfig, env_id: str) -> str:
    return f"mopd.teachers.{env_id}" if env_id in mopd.teachers else "mopd.default_teacher"


def check_teachers(mopd: MOPDConfig, env_ids: Iterable[str], temperature: float) -> None:
    """Every mix env has a teacher whose folder exists (``ConfigError`` naming the key)."""
    if mopd.teacher_engine == "vllm" and temperature not in GREEDY_TEMPERATURES:
        raise ConfigError(
            f"mopd.teacher_engine: vllm scores with the raw (T = 1) distribution, but rollout.temperature "
            f"is {temperature}; use mopd.teacher_engine: hf or rollout.temperature: 1"
        )
    env_ids = list(env_ids)
    missing = [env_id for env_id in env_ids if env_id not in teacher_refs(mopd, env_ids)]
    if missing:
        raise ConfigError(
            f"mopd.teachers has no teacher for mix env(s) {', '.join(missing)}: add "
            "mopd.teachers.<env id>=<checkpoint folder> or set mopd.default_teacher"
        )
    entries = {f"mopd.teachers.{env_id}": path for env_id, path in mopd.teachers.items()}
    if mopd.default_teacher is not None:
        entries["mopd.default_teacher"] = mopd.default_teacher
    auto = [key for key, path in entries.items() if path == AUTO]
    if auto:
        raise ConfigError(
            f"{', '.join(auto)}: 'auto' is resolved only by a cascade pipeline (cascade-envs train "
            "cascade.yaml picks each domain's teacher from earlier stages); to run this config on its "
            "own, set each with --set <key>=<teacher checkpoint folder>"
        )
    for key, path in entries.items():
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"{key} must be a teacher checkpoint folder or 'embedded', got {path!r}")
        try:
            model_path(path)
        except CascadeError as exc:
            raise ConfigError(f"{key}: {exc}") from None


# ----- a pipeline's choice ----------------------------------------------------------------------------


@dataclass
class Candidate:
    """A checkpoint a teacher can be chosen from: the start model or a finished stage."""

    label: str
    checkpoint: str
    scores: dict[str, dict[str, Any]]


def choose_teachers(
    stage: str,
    refs: dict[str, str],
    candidates: list[Candidate],
    eval_envs: list[str],
    stages: Iterable[str] = (),
) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """Resolve ``refs`` (``auto``, a candidate's label, or a folder) against ``candidates`` (in pipeline
    order; ``stages``: every stage's name, so one that has not run yet is refused); returns the teacher
    folders and, per env, the choice made and why."""
    by_label = {c.label: c for c in candidates}
    teachers: dict[str, str] = {}
    choices: dict[str, dict[str, Any]] = {}
    for env_id, ref in refs.items():
        key = f"stage {stage}: mopd.teachers.{env_id}"
        if ref == AUTO:
            if env_id not in eval_envs:
                raise ConfigError(
                    f"{key} is auto, but {env_id} is not evaluated: add it to eval.envs (with held-out "
                    "tasks) so the teacher can be chosen by score, or name a checkpoint"
                )
            means = [(c, (c.scores.get(env_id) or {}).get("mean")) for c in candidates]
            scored = [(c, float(v)) for c, v in means if isinstance(v, (int, float))]
            if not scored:
                raise ConfigError(
                    f"{key} is auto, but no checkpoint has a score on {env_id} (every answer was "
                    "masked or it was never evaluated): fix its judge/verifier or name a checkpoint"
                )
            best = max(value for _, value in scored)
            chosen = [c for c, value in scored if value == best][-1]  # ties: the later stage
            teachers[env_id] = chosen.checkpoint
            choices[env_id] = {
                "from": chosen.label,
                "checkpoint": chosen.checkpoint,
                "score": best,
                "rule": "auto",
                "scores": {c.label: value for c, value in scored},
            }
        elif ref in by_label:
            teachers[env_id] = by_label[ref].checkpoint
            choices[env_id] = {"from": ref, "checkpoint": by_label[ref].checkpoint, "rule": "named"}
        elif ref in stages:
            raise ConfigError(f"{key} names stage {ref!r}, which does not run before it")
        else:
            teachers[env_id] = ref
            choices[env_id] = {"from": ref, "checkpoint": ref, "rule": "path"}
    return teachers, choices


def teacher_line(stage: str, choices: dict[str, dict[str, Any]]) -> str:
    parts = []
    for env_id, choice in choices.items():
        score = (
            f" ({choice['score']:.3f}, best of {len(choice['scores'])})" if choice["rule"] == "auto" else ""
        )
        parts.append(f"{env_id} <- {choice['from']}{score}")
    return f"{stage}: MOPD teachers: " + "; ".join(parts)


# ----- loading ---------------------------------------------------------------------------------------


def teacher_dtype(name: WeightDtype, device: torch.device) -> WeightDtype:
    """``mopd.teacher_dtype`` for ``load_model`` (``auto``: bfloat16 on GPU, float32 on CPU)."""
    if name == "auto":
        return "bfloat16" if device.type == "cuda" else "float32"
    return name


def check_same_vocabulary(
    name: str, t_size: int, teacher_tokenizer: Any, student: Any, student_tokenizer: Any
) -> None:
    """``ConfigError`` naming the teacher unless it shares the student's tokenizer and output vocabulary
    (``t_size``: the teacher's output vocabulary size)."""
    s_size = student.get_output_embeddings().weight.shape[0]
    if t_size != s_size:
        raise ConfigError(
            f"{name}: the teacher's vocabulary has {t_size} entries, the student's {s_size}; "
            "MOPD teachers must share the student's tokenizer"
        )
    tokenizers = (teacher_tokenizer, student_tokenizer)
    if None not in tokenizers and teacher_tokenizer.get_vocab() != student_tokenizer.get_vocab():
        raise ConfigError(
            f"{name}: the teacher's tokenizer differs from the student's; "
            "MOPD teachers must share the student's tokenizer"
        )


def load_teachers(
    mopd: MOPDConfig,
    env_ids: Iterable[str],
    *,
    temperature: float,
    micro_batch_size: BatchSize,
    student: Any,
    student_tokenizer: Any,
    pad_id: int,
) -> RoutedSource:
    """The ``teacher`` source of ``env_ids``: each distinct folder loaded once, its vocabulary checked."""
    device = next(student.parameters()).device
    dtype = teacher_dtype(mopd.teacher_dtype, device)
    scorers: dict[str, LogprobSource] = {}
    assignment: dict[str, str] = {}
    for env_id, path in teacher_refs(mopd, env_ids).items():
        folder = str(model_path(path).resolve())
        assignment[env_id] = folder
        if folder in scorers:
            continue
        where = f"{_where(mopd, env_id)} ({path})"
        if mopd.teacher_placement == "ray":
            from .ray_teacher import RayTeacher

            remote = RayTeacher(
                _where(mopd, env_id),
                folder,
                engine=mopd.teacher_engine,
                dtype=dtype,
                temperature=temperature,
                micro_batch_size=micro_batch_size,
                pad_id=pad_id,
                engine_kwargs=mopd.teacher_engine_kwargs,
                actor_options=mopd.teacher_actor_options,
            )
            check_same_vocabulary(where, remote.vocab_size, remote.tokenizer(), student, student_tokenizer)
            scorers[folder] = remote
            continue
        if mopd.teacher_engine == "vllm":
            kwargs = {"dtype": dtype, **mopd.teacher_engine_kwargs}
            teacher = VLLMTeacher(_where(mopd, env_id), folder, temperature=temperature, **kwargs)
            check_same_vocabulary(where, teacher.vocab_size, teacher.tokenizer(), student, student_tokenizer)
            scorers[folder] = teacher
            continue
        model_config = ModelConfig(path=path, dtype=dtype, device=str(device), gradient_checkpointing=False)
        model, tokenizer = load_model(model_config)
        check_same_vocabulary(
            where, model.get_output_embeddings().weight.shape[0], tokenizer, student, student_tokenizer
        )
        scorers[folder] = HFScorer(
            _where(mopd, env_id),
            model,
            pad_id=pad_id,
            micro_batch_size=micro_batch_size,
            temperature=temperature,
        )
    return RoutedSource("teacher", scorers, assignment)
