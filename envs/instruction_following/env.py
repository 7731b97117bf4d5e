"""Instruction following: IFEval, IF-RLVR (IFEvalG) and IFBench instructions with verifiable checks.

Rows load in the IFEval / IFBench layout (``key``, ``prompt``, ``instruction_id_list``,
``kwargs``) and in the Nemotron / NeMo Gym layout (``responses_create_params`` plus the same
fields, at the top level or under ``verifier_metadata``, with ``kwargs`` a list of dicts that
often lists every possible kwarg as null). Each instruction id and its kwargs are checked when the
task loads, so scoring never meets an unknown id or a missing kwarg.

Scoring follows IFEval. A reply with nothing visible after the reasoning (empty, whitespace,
zero-width characters: the kernel's no-answer rule) scores 0 before any check, whatever "no
commas" or "lowercase" say; a loose variant with nothing visible follows no instruction. ``strict``
checks the answer as it is, loose (``strict=False``) accepts an instruction when any of the
eight standard variants passes (first line, last line or both removed; asterisks stripped). The
reward is 1 when every instruction is followed (``binary``, as in IF-RL) or the fraction followed
(``fraction``).

Limits: the checks run in the env's ``VerifierPool`` (worker processes, started on first use,
kept warm, closed by ``aclose``) under a hard ``timeout_s`` per answer, so no answer can stall
the event loop. Measured on 2 cores with the bundled tasks and 294 real answers (mean 1.7k
characters): with 64 answers in flight the pool scores 1.3x more answers per second than
in-process checks (the workers run in parallel; the loop's own CPU per answer drops ~6x), one
answer at a time it scores 0.75-0.95x as many; sending only answers over a length threshold to
the pool was slower than either. So ``inline_chars`` (answers up to that length are checked
in-process) defaults to 0. Answers over ``max_answer_chars`` are not checked. Both limits are
the answer's fault (the instructions and their kwargs are validated and small when the task
loads), so they score 0 with a reason starting "verifier limit: ". Masked instead: a resource a
checker needs is not installed, a checker raised, or the worker crashed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cascade_envs.core import Reward, Row, TaskError
from cascade_envs.data import Prompt
from cascade_envs.env import Env
from cascade_envs.verifier_pool import VerifierLimit, VerifierPool
from cascade_envs.workers import CallFailed, WorkerDied

from .registry import load_families, validate_kwargs
from .text import ResourceUnavailable
from .verify import follow_checks, response_variants, warm_up

REWARD_MODES = ("binary", "fraction")
FIELDS = ("instruction_id_list", "kwargs", "grading_mode", "prompt")
MAX_ANSWER_CHARS = 200_000
TIMEOUT_S = 10.0
INLINE_CHARS = 0

__all__ = ["InstructionFollowingEnv", "response_variants"]


def _row_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The verifier fields of a row; ``verifier_metadata`` (newer NeMo Gym rows) wins over top level."""
    meta = row.get("verifier_metadata")
    if meta is not None and not isinstance(meta, dict):
        raise TaskError("must be an object", "verifier_metadata")
    meta = meta or {}
    return {name: meta[name] if name in meta else row.get(name) for name in FIELDS}


@dataclass(frozen=True)
class InstructionTask:
    """A row, checked: its instructions as ``{"id", "kwargs"}`` checks (kwargs validated) and its grading mode."""

    prompt: Prompt
    checks: tuple[dict[str, Any], ...]
    grading_mode: str = "binary"


class InstructionFollowingEnv(Env[InstructionTask]):
    """Rewards a response for following the verifiable instructions in its prompt."""

    default_tasks = "bundled:instruction_following/samples.jsonl"

    def __init__(
        self,
        tasks: Any = None,
        *,
        strict: bool = True,
        reward_mode: str | None = None,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        timeout_s: float = TIMEOUT_S,
        inline_chars: int = INLINE_CHARS,
        workers: int | None = None,
        **kwargs: Any,
    ):
        """``reward_mode``: "binary" or "fraction"; None uses each row's ``grading_mode`` (else binary).

        ``max_answer_chars``: longer final answers score 0 unchecked (NLTK tokenization costs about
        30 s per megabyte of adversarial text); ``timeout_s``: hard limit per answer's checks;
        ``inline_chars``: answers up to this length are checked in-process (see the module doc);
        ``workers``: verifier processes (default up to 4, one per CPU).
        """
        if reward_mode is not None and reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        if max_answer_chars < 1:
            raise ValueError("max_answer_chars must be positive")
        self.strict = bool(strict)
        self.reward_mode = reward_mode
        self.max_answer_chars = int(max_answer_chars)
        self.inline_chars = int(inline_chars)
        load_families()
        self.verifier = VerifierPool(
            timeout_s=timeout_s, max_chars=self.max_answer_chars, workers=workers, initializer=warm_up
        )
        super().__init__(tasks, **kwargs)

    def load_task(self, row: Row) -> InstructionTask:
        prompt = Prompt.of(row)
        fields = _row_fields(row)
        ids, kwargs_list = fields["instruction_id_list"], fields["kwargs"]
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise TaskError("expected a non-empty list of instruction id strings", "instruction_id_list")
        if kwargs_list is None:
            kwargs_list = [None] * len(ids)
        if not isinstance(kwargs_list, list) or len(kwargs_list) != len(ids):
            raise TaskError(f"expected a list of {len(ids)} kwargs objects, one per instruction", "kwargs")
        checks = tuple(
            {"id": i, "kwargs": validate_kwargs(i, k)} for i, k in zip(ids, kwargs_list, strict=True)
        )
        mode = fields["grading_mode"] or "binary"
        if mode not in REWARD_MODES:
            raise TaskError(f"must be one of {REWARD_MODES}, got {mode!r}", "grading_mode")
        return InstructionTask(prompt, checks, mode)

    def follow_list(self, task: InstructionTask, answer: str) -> list[bool]:
        """Whether ``answer`` follows each instruction of ``task`` (in-process, no limits)."""
        return follow_checks(task.checks, answer, self.strict)

    async def acheck(self, task: InstructionTask, answer: str) -> Reward | None:
        """The public check: every instruction is stated in the prompt, so it is the whole check."""
        return await self.ascore(task, answer)

    async def ascore(self, task: InstructionTask, answer: str) -> Reward:
        try:
            self.verifier.check_size(answer)
            inline = len(answer) <= self.inline_chars
            followed = await self.verifier.run(follow_checks, task.checks, answer, self.strict, inline=inline)
        except VerifierLimit as exc:
            return Reward.zero(str(exc))
        except ResourceUnavailable as exc:
            return Reward.failed(f"resource unavailable: {exc}")
        except CallFailed as exc:
            if exc.kind == "ResourceUnavailable":
                return Reward.failed(f"resource unavailable: {exc.detail}")
            return Reward.failed(f"checker raised {exc}")
        except WorkerDied as exc:
            return Reward.failed(f"verifier failed: {exc}")
        ids = [check["id"] for check in task.checks]
        fraction = sum(followed) / len(followed)
        mode = self.reward_mode or task.grading_mode
        value = fraction if mode == "fraction" else float(all(followed))
        failed = [i for i, ok in zip(ids, followed, strict=True) if not ok]
        components = {
            "instructions": [{"id": i, "followed": ok} for i, ok in zip(ids, followed, strict=True)],
            "followed_fraction": fraction,
            "strict": self.strict,
            "reward_mode": mode,
        }
        reason = None
        if failed:
            reason = f"not followed: {', '.join(failed)}"
        return Reward(value, components, reason=reason)

    async def aclose(self) -> None:
        """Stop the verifier workers."""
        await self.verifier.aclose()
        await super().aclose()
