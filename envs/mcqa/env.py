"""``cascade/MCQA-v0``: multiple-choice questions scored 1/0 against the gold letter.

Rows use the NeMo Gym ``mcqa`` layout: ``responses_create_params.input`` (the prompt), ``options``
(a list of ``{letter: text}``), ``expected_answer`` (the gold letter), ``grading_mode`` and
optionally ``template_metadata.output_regex``. See ``grading.py`` for what each mode accepts.
"""

from __future__ import annotations

from typing import Any, ClassVar

from cascade_envs import Env, Reward, Task, TaskError

from .grading import DEFAULT_MODE, GRADING_MODES, Options, compile_output_regex, custom_regex


def _check_options(value: Any) -> list[dict[str, str | None]]:
    """Validate ``[{"A": "..."}, ...]`` (one ``{"A": "...", ...}`` mapping is split into that form)."""
    entries = [{k: v} for k, v in value.items()] if isinstance(value, dict) else value
    if not isinstance(entries, list) or not entries:
        raise TaskError("expected a non-empty list of {letter: text} objects", "options")
    for entry in entries:
        if not isinstance(entry, dict) or not entry:
            raise TaskError(f"each option must be a {{letter: text}} object, got {entry!r:.80}", "options")
        for letter, text in entry.items():
            if not (isinstance(letter, str) and len(letter) == 1 and letter.isalpha()):
                raise TaskError(f"option keys must be single letters, got {letter!r:.20}", "options")
            if text is not None and not isinstance(text, str):
                raise TaskError(f"option {letter} must be text, got {type(text).__name__}", "options")
    if not _pairs(entries):
        raise TaskError("every option is null", "options")
    return entries


def _pairs(options: list[dict[str, str | None]]) -> Options:
    """``(letter, text)`` pairs of validated options; null entries are dropped, as upstream does."""
    return [(letter.upper(), text) for entry in options for letter, text in entry.items() if text is not None]


class MCQAEnv(Env):
    """Multiple-choice QA: the extracted answer letter must equal ``expected_answer``.

    ``grading_mode`` overrides every row's own mode when given (like the upstream server setting).
    """

    default_tasks: ClassVar[str | None] = "bundled:mcqa/samples.jsonl"

    def __init__(self, tasks: Any = None, *, grading_mode: str | None = None, **kwargs: Any):
        if grading_mode is not None and grading_mode not in GRADING_MODES:
            raise ValueError(f"unknown grading_mode {grading_mode!r}; choose from {sorted(GRADING_MODES)}")
        self.grading_mode = grading_mode
        super().__init__(tasks, **kwargs)

    def load_task(self, row: dict[str, Any]) -> Task:
        task = super().load_task(row)
        options = _check_options(row.get("options"))
        if options is not row["options"]:
            task = {**task, "options": options}
        letters = {letter for letter, _ in _pairs(options)}
        gold = row.get("expected_answer")
        if not isinstance(gold, str) or gold.strip().upper() not in letters:
            raise TaskError(f"must be one of the option letters {sorted(letters)}, got {gold!r:.40}", "expected_answer")
        mode = row.get("grading_mode") or DEFAULT_MODE
        if mode not in GRADING_MODES:
            raise TaskError(f"unknown mode {mode!r:.40}; choose from {sorted(GRADING_MODES)}", "grading_mode")
        meta = row.get("template_metadata")
        if meta is not None and not isinstance(meta, dict):
            raise TaskError("must be an object", "template_metadata")
        if meta and "output_regex" in meta:
            try:
                compile_output_regex(meta["output_regex"])
            except ValueError as exc:
                raise TaskError(str(exc), "template_metadata.output_regex") from exc
        return task

    async def ascore(self, task: Task, answer: str) -> Reward:
        options = _pairs(task["options"])
        allowed = {letter for letter, _ in options}
        gold = task["expected_answer"].strip().upper()
        mode = self.grading_mode or task.get("grading_mode") or DEFAULT_MODE
        info = {"expected_answer": gold, "grading_mode": mode, "extracted_answer": None}
        if not answer.strip():
            return Reward.zero("empty response", **info)
        predicted = None
        regex = (task.get("template_metadata") or {}).get("output_regex")
        if regex:
            predicted = custom_regex(answer, compile_output_regex(regex), options, allowed)
        if predicted is None:
            predicted = GRADING_MODES[mode](answer, options, allowed)
        info["extracted_answer"] = predicted
        if predicted is None:
            return Reward.zero(f"no answer letter found ({mode})", **info)
        if predicted != gold:
            return Reward.zero(f"answered {predicted}, expected {gold}", **info)
        return Reward(1.0, info)
