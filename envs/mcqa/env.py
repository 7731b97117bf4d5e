"""``cascade/MCQA-v0``: multiple-choice questions scored 1/0 against the gold letter.

Rows use the NeMo Gym ``mcqa`` layout: ``responses_create_params.input`` (the prompt), ``options``
(a list of ``{letter: text}``), ``expected_answer`` (the gold letter), ``grading_mode`` and
optionally ``template_metadata.output_regex``. See ``grading.py`` for what each mode accepts.

Rows load as NeMo Gym reads them, with a warning logged once per distinct problem: a pattern of
``output_regex`` that does not compile is dropped (an empty list of patterns is no regex), and the
row's other patterns, then its ``grading_mode``, decide; a row with a usable ``output_regex`` may
have no options (missing, empty or all null), its ``expected_answer`` then being a single letter
that the regex's capture must equal. Rejected (``TaskError``): a row that no answer could win, i.e.
one with neither options nor a usable regex, or whose ``expected_answer`` is not an option letter.

Limits: answers over ``max_answer_chars`` are not graded. The built-in extractors are linear in
the answer and run in-process; a row's ``output_regex`` runs in the env's ``VerifierPool``
(worker processes, started on first use, closed by ``aclose``) under a hard ``timeout_s``,
unless ``grading.regex_steps`` proves it cheap on this answer: at most ``inline_steps`` paths
(default 4M, measured at under ~10 ms; e.g. ``Answer:\\s*\\(?([A-J])\\)?`` on up to ~1000
characters), where a worker round trip (~0.15 ms) would make the check ~3.5x dearer. Scored
0 with a reason starting "verifier limit: " (the answer's fault): an answer over the size limit,
or one that makes the row's regex run past the time limit while the regex handles a short
canonical answer (``\\boxed{A}``, ``Answer: A``) quickly. Masked (the task's fault): the regex
times out on those canonical answers too, i.e. it is unusable whatever the model writes; also
masked: the worker crashed or the check raised.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from cascade_envs import Env, Prompt, Reward, Row, TaskError
from cascade_envs.verifier_pool import VerifierLimit, VerifierPool
from cascade_envs.workers import WorkerError

from .grading import DEFAULT_MODE, GRADING_MODES, Options, regex_letter, regex_steps, split_output_regex

MAX_ANSWER_CHARS = 200_000
TIMEOUT_S = 10.0
PROBES = ("\\boxed{A}", "Answer: A")
"""Short canonical answers: a row regex that cannot handle these in time is the task's fault."""
PROBE_TIMEOUT_S = 2.0
INLINE_STEPS = 4_000_000
log = logging.getLogger("cascade_envs.mcqa")


_warned: set[tuple[str, str]] = set()


def _warn_once(kind: str, detail: str, message: str, *args: Any) -> None:
    """Log ``message`` the first time this process meets problem ``(kind, detail)``."""
    if (kind, detail) not in _warned:
        _warned.add((kind, detail))
        log.warning(message, *args)


def _check_options(value: Any, required: bool) -> list[dict[str, str | None]]:
    """Validate ``[{"A": "..."}, ...]`` (one ``{"A": "...", ...}`` mapping is split into that form).

    Missing, empty or all-null options are allowed when not ``required`` (a row whose
    ``output_regex`` decides); they come back as ``[]``.
    """
    if not required and (value is None or value == [] or value == {}):
        return []
    entries = [{k: v} for k, v in value.items()] if isinstance(value, dict) else value
    if not isinstance(entries, list) or not entries:
        raise TaskError("expected a non-empty list of {letter: text} objects (or an output_regex)", "options")
    for entry in entries:
        if not isinstance(entry, dict) or not entry:
            raise TaskError(f"each option must be a {{letter: text}} object, got {entry!r:.80}", "options")
        for letter, text in entry.items():
            if not (isinstance(letter, str) and len(letter) == 1 and letter.isalpha()):
                raise TaskError(f"option keys must be single letters, got {letter!r:.20}", "options")
            if text is not None and not isinstance(text, str):
                raise TaskError(f"option {letter} must be text, got {type(text).__name__}", "options")
    if required and not _pairs(entries):
        raise TaskError("every option is null (and the row has no usable output_regex)", "options")
    return entries


def _pairs(options: list[dict[str, str | None]]) -> Options:
    """``(letter, text)`` pairs of validated options; null entries are dropped, as upstream does."""
    return [(letter.upper(), text) for entry in options for letter, text in entry.items() if text is not None]


@dataclass(frozen=True)
class MCQATask:
    """An MCQA row, checked: its options, the gold letter, its grading mode and its usable ``output_regex``."""

    prompt: Prompt
    options: Options
    expected_answer: str
    """The gold letter, upper-case."""
    grading_mode: str = DEFAULT_MODE
    output_regex: list[str] | str | None = None
    """The row's patterns that compile (``None``: no usable regex)."""


class MCQAEnv(Env[MCQATask]):
    """Multiple-choice QA: the extracted answer letter must equal ``expected_answer``.

    ``grading_mode`` overrides every row's own mode when given (like the upstream server setting).
    ``timeout_s``: hard limit per answer on a row's ``output_regex``; ``max_answer_chars``: longer
    answers score 0 ungraded; ``inline_steps``: see the module doc (0: always a worker);
    ``workers``: verifier processes (default up to 4, one per CPU).
    """

    default_tasks: ClassVar[str | None] = "bundled:mcqa/samples.jsonl"

    def __init__(
        self,
        tasks: Any = None,
        *,
        grading_mode: str | None = None,
        timeout_s: float = TIMEOUT_S,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        inline_steps: float = INLINE_STEPS,
        workers: int | None = None,
        **kwargs: Any,
    ):
        if grading_mode is not None and grading_mode not in GRADING_MODES:
            raise ValueError(f"unknown grading_mode {grading_mode!r}; choose from {sorted(GRADING_MODES)}")
        self.grading_mode = grading_mode
        self.inline_steps = float(inline_steps)
        self.verifier = VerifierPool(
            timeout_s=timeout_s, max_chars=max_answer_chars, workers=workers, preload=(regex_letter,)
        )
        self._slow_regexes: dict[str, bool] = {}  # output_regex -> times out on the canonical probes
        super().__init__(tasks, **kwargs)

    def load_task(self, row: Row) -> MCQATask:
        prompt = Prompt.of(row)
        meta = row.get("template_metadata")
        if meta is not None and not isinstance(meta, dict):
            raise TaskError("must be an object", "template_metadata")
        usable = self._usable_regexes(meta)
        options = _pairs(_check_options(row.get("options"), required=not usable))
        letters = {letter for letter, _ in options}
        gold = row.get("expected_answer")
        if not letters:
            _warn_once(
                "no_options",
                "",
                "MCQA rows without options are graded by their output_regex alone "
                "(its captured letter is trusted, as in NeMo Gym)",
            )
            if not (isinstance(gold, str) and len(gold.strip()) == 1 and gold.strip().isalpha()):
                raise TaskError(
                    f"a row without options needs a single letter, got {gold!r:.40}", "expected_answer"
                )
        elif not isinstance(gold, str) or gold.strip().upper() not in letters:
            raise TaskError(
                f"must be one of the option letters {sorted(letters)}, got {gold!r:.40}", "expected_answer"
            )
        mode = row.get("grading_mode") or DEFAULT_MODE
        if mode not in GRADING_MODES:
            raise TaskError(f"unknown mode {mode!r:.40}; choose from {sorted(GRADING_MODES)}", "grading_mode")
        return MCQATask(prompt, options, gold.strip().upper(), mode, usable)

    @staticmethod
    def _usable_regexes(meta: dict[str, Any] | None) -> list[str] | str | None:
        """The row's ``output_regex`` without its invalid patterns (warned about once each), as NeMo
        Gym skips them; ``None`` when none is usable. Not a string or list of strings: TaskError."""
        if not meta or "output_regex" not in meta:
            return None
        value = meta["output_regex"]
        try:
            usable, invalid = split_output_regex(value)
        except ValueError as exc:
            raise TaskError(str(exc), "template_metadata.output_regex") from exc
        for pattern, error in invalid:
            _warn_once(
                "invalid_regex",
                pattern,
                "template_metadata.output_regex %r is not a valid regex (%s): "
                "skipped, as NeMo Gym does; the row's other patterns, then its grading_mode, decide",
                pattern[:200],
                error,
            )
        if not usable:
            if not invalid:
                _warn_once(
                    "empty_regex_list",
                    "",
                    "template_metadata.output_regex is an empty list: "
                    "the row's grading_mode decides, as in NeMo Gym",
                )
            return None
        return value if not invalid else usable

    async def _letter(self, task: MCQATask, answer: str) -> str | None:
        """The answer's letter: the row's ``output_regex`` first, then the grading mode.

        Raises ``VerifierLimit`` (too long, too slow) or ``WorkerError`` (the regex check failed).
        """
        options = task.options
        allowed = {letter for letter, _ in options}
        self.verifier.check_size(answer)
        regex = task.output_regex
        if regex:
            inline = regex_steps(regex, len(answer)) <= self.inline_steps
            predicted = await self.verifier.run(regex_letter, answer, regex, options, allowed, inline=inline)
            if predicted is not None:
                return str(predicted)
        return GRADING_MODES[self.grading_mode or task.grading_mode](answer, options, allowed)

    async def aextract_answer(self, task: MCQATask, answer: str) -> str | None:
        """The answer's letter as ``ascore`` reads it; ``None`` when none is found or the check fails."""
        try:
            return await self._letter(task, answer)
        except (VerifierLimit, WorkerError):
            return None

    async def ascore(self, task: MCQATask, answer: str) -> Reward:
        options = task.options
        allowed = {letter for letter, _ in options}
        gold = task.expected_answer
        mode = self.grading_mode or task.grading_mode
        info = {"expected_answer": gold, "grading_mode": mode, "extracted_answer": None}
        regex = task.output_regex
        try:
            predicted = await self._letter(task, answer)
        except VerifierLimit as exc:
            if exc.kind == "time" and await self._regex_is_unusable(regex, options, allowed):
                return Reward.failed(
                    f"output_regex times out even on a short canonical answer: {exc}", **info
                )
            return Reward.zero(str(exc), **info)
        except WorkerError as exc:
            return Reward.failed(f"output_regex check failed: {exc}", **info)
        info["extracted_answer"] = predicted
        if predicted is None:
            return Reward.zero(f"no answer letter found ({mode})", **info)
        if predicted != gold:
            return Reward.zero(f"answered {predicted}, expected {gold}", **info)
        return Reward(1.0, info)

    async def _regex_is_unusable(self, regex: Any, options: Options, allowed: set[str]) -> bool:
        """Whether ``regex`` also times out on the short canonical answers (cached per regex)."""
        key = json.dumps(regex)
        if key not in self._slow_regexes:
            limit = min(self.verifier.timeout_s, PROBE_TIMEOUT_S)
            try:
                for probe in PROBES:
                    await self.verifier.run(regex_letter, probe, regex, options, allowed, timeout_s=limit)
                slow = False
            except VerifierLimit:
                slow = True
            except WorkerError:
                return False
            if len(self._slow_regexes) > 1024:
                self._slow_regexes.clear()
            self._slow_regexes[key] = slow
        return self._slow_regexes[key]

    async def aclose(self) -> None:
        """Stop the verifier workers."""
        await self.verifier.aclose()
        await super().aclose()
