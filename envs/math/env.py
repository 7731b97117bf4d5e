"""``cascade/Math-v0``: a final answer checked for symbolic equivalence with ``expected_answer``.

Rows use the NeMo Gym ``math_with_judge`` layout: ``responses_create_params.input`` (the prompt),
``question`` and ``expected_answer``. Checks run in the env's own pool of worker processes
(``cascade_envs.workers``; started on first use, stopped by ``aclose``), never on the event
loop, each with a hard timeout and a memory cap. Whose fault a check that overruns or crashes is,
is decided by a control: the gold answer checked against itself, under the same limits. When the
control passes, the answer's check is what overran (a tower of exponents, a huge expression): a 0
with a reason starting "verifier limit: ", so a model cannot buy a mask with an answer that stalls
sympy. When the control fails too (sympy stalls on the gold answer, or the machine is overloaded),
the sample is masked with both reasons. An answer over ``max_answer_chars`` scores 0 unchecked.

Upstream falls back to an LLM judge when the symbolic check fails; this env is the symbolic
check alone, so answers that only a judge accepts score 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

from cascade_envs import Env, Prompt, Reward, Row, TaskError
from cascade_envs.verifier_pool import LIMIT_PREFIX
from cascade_envs.workers import CallFailed, CallTimeout, WorkerDied, WorkerPool

from .verify import check, extract, strip_delimiters

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 4096
MAX_ANSWER_CHARS = 100_000
"""Final answers longer than this (about 25K tokens after the reasoning) score 0 unchecked."""


@dataclass(frozen=True)
class MathTask:
    """A math row: its prompt and the gold answer (a number is read as its text)."""

    prompt: Prompt
    expected_answer: str
    question: str | None = None


class MathEnv(Env[MathTask]):
    """Math answers verified with math-verify (gold first), reward 1/0.

    ``timeout_s`` bounds each check; ``workers`` is the size of the env's verifier pool (default:
    up to 4, one per CPU); ``memory_mb`` caps each worker's address space; ``max_answer_chars``
    bounds the final answer that is checked at all.
    """

    default_tasks: ClassVar[str | None] = "bundled:math/samples.jsonl"

    def __init__(
        self,
        tasks: Any = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        workers: int | None = None,
        memory_mb: int | None = DEFAULT_MEMORY_MB,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        **kwargs: Any,
    ):
        if timeout_s <= 0 or max_answer_chars < 1:
            raise ValueError("timeout_s must be positive and max_answer_chars >= 1")
        self.max_answer_chars = int(max_answer_chars)
        self.timeout_s = float(timeout_s)
        self.workers = int(workers or min(4, os.cpu_count() or 1))
        self.memory_mb = memory_mb
        self._pool: WorkerPool | None = None
        super().__init__(tasks, **kwargs)

    def load_task(self, row: Row) -> MathTask:
        prompt = Prompt.of(row)
        gold = row.get("expected_answer")
        if isinstance(gold, (int, float)) and not isinstance(gold, bool):
            gold = str(gold)
        elif not isinstance(gold, str) or not gold.strip():
            raise TaskError(f"expected a non-empty answer string, got {gold!r:.40}", "expected_answer")
        question = row.get("question")
        if question is not None and not isinstance(question, str):
            raise TaskError("must be a string", "question")
        return MathTask(prompt, gold, question)

    @property
    def pool(self) -> WorkerPool:
        """This env's verifier pool (made on first use; its processes start on its first call)."""
        if self._pool is None:
            self._pool = WorkerPool(check, self.workers, self.timeout_s, self.memory_mb)
        return self._pool

    async def aclose(self) -> None:
        """Stop the verifier workers."""
        if self._pool is not None:
            await self._pool.aclose()
        await super().aclose()

    async def aextract_answer(self, task: MathTask, answer: str) -> str | None:
        """math-verify's reading of the answer (in the verifier pool); ``None`` when it fails."""
        try:
            extracted = await self.pool.run(extract, answer)
        except (CallTimeout, WorkerDied, CallFailed):
            return None
        return extracted if isinstance(extracted, str) else None

    async def ascore(self, task: MathTask, answer: str) -> Reward:
        gold = task.expected_answer
        if len(answer) > self.max_answer_chars:
            return Reward.zero(
                f"{LIMIT_PREFIX}the answer has {len(answer):,} characters, over max_answer_chars="
                f"{self.max_answer_chars:,}",
                expected_answer=gold,
            )
        try:
            result = await self.pool.call(gold, answer)
        except (CallTimeout, WorkerDied, CallFailed) as exc:
            return await self._weigh_failed_check(gold, _failure(exc, self.timeout_s))
        info = {"expected_answer": gold, "extracted_answer": result["extracted"]}
        if not result["gold_parsed"]:
            return Reward.failed("math-verify could not parse expected_answer", **info)
        if result["correct"]:
            return Reward(1.0, info)
        if result["extracted"] is None:
            return Reward.zero("no answer could be extracted", **info)
        return Reward.zero("answer is not equivalent to expected_answer", **info)

    async def _weigh_failed_check(self, gold: str, failure: str) -> Reward:
        """The answer's fault (0) when the gold answer checks against itself under the same limits,
        else the verifier's (masked, with both reasons)."""
        try:
            control = await self.pool.call(gold, "\\boxed{" + strip_delimiters(gold) + "}")
        except (CallTimeout, WorkerDied, CallFailed) as exc:
            control_failure = _failure(exc, self.timeout_s)
            return Reward.failed(
                f"{failure}; the gold answer checked against itself failed too ({control_failure})",
                expected_answer=gold,
            )
        if not control["gold_parsed"]:
            return Reward.failed("math-verify could not parse expected_answer", expected_answer=gold)
        return Reward.zero(
            f"{LIMIT_PREFIX}{failure} (the gold answer checks against itself within the limits)",
            expected_answer=gold,
        )


def _failure(exc: Exception, timeout_s: float) -> str:
    if isinstance(exc, CallTimeout):
        return f"verification timed out after {timeout_s:g} s"
    return f"math-verify failed: {exc}"
