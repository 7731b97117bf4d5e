"""``cascade/AgentlessRepair-v0``: agentless issue repair with SEARCH/REPLACE edits (the agentless SWE RL stage).

The model sees an issue and the files localised for it (the gold location plus the top-``top_k``
retrieved files, 5 in the report) and answers with SEARCH/REPLACE edits (``edits.py``). The env
applies them in memory to the files of the task (paths are keys: nothing touches a filesystem),
writes the unified diff, and scores it with one of two rewards:

- ``reward="judge"`` (default, as the report: GPT-OSS-120B as the reward model): an LLM judge
  grades the patch against the issue and the reference patch on a 0-10 scale, mapped to [0, 1]
  (template and scale: ``prompt.py``). A format error scores 0 with its reason, without a judge
  call. A reply without a valid final ``SCORE:`` line is weighed by ``cascade_envs.judges.fault``:
  the task is sent with the reference patch as the candidate (the control request, at most once
  per task and ``judge_control_ttl_s``), and when the judge scores that, the failure is the
  patch's: 0 with the reason. Masked, with the reason: the judge call failed after its retries
  (down, 5xx, past its deadline), or the control got no score either.
- ``reward="similarity"`` (SWE-RL; no judge needed, none is built): the mean per-file
  ``SequenceMatcher`` ratio between the patch and the reference patch (``similarity.py``); a
  format error scores ``format_error_reward`` (-1, as SWE-RL; 0 keeps the conformance contract
  that a malformed answer is a plain 0).

Format errors (the model's fault): no edit, a broken block, a SEARCH that does not match or
matches twice, an unknown, absolute or ``..`` path, binary content, a reply over
``max_answer_chars`` or with more than ``max_edits`` blocks, edits that change nothing, and, on
rows whose prompt asks for them, a missing ``<solution>`` block; a repair reply with nothing
visible scores as a format error too, with the kernel's no-answer reason. The overlong rule of the base
class still gives 0 (not -1) to a generation cut at the length limit. Scoring runs inline for
small replies and in a ``VerifierPool`` worker otherwise, under ``timeout_s``; a reply that runs
past it scores 0 ("verifier limit: ...": the task's sizes are bounded when it loads, so only a
pathological reply gets there); a crashed worker masks the sample.

The policy answers in thinking mode (the design default; the report names no mode for this
stage) and episodes are capped at the report's 98,304-token sequence length; neither the judge
nor the similarity ever sees the reasoning. The report also masks the loss of prompts where no
rollout scores above 0.5: that is the trainer's ``rollout.mask_groups_below: 0.5``.

Rows (``rows.py``): this project's repair rows, and NeMo Gym ``swerl_gen`` / ``swerl_llm_judge``
rows loaded unchanged. ``swerl_gen`` ``eval`` rows are repairs scored as above (upstream runs
the instance's tests in a container instead; we have no images, and the report grades with a
judge for that reason). ``repro-gen`` rows need their test run in the instance's image: every
answer to one is masked saying so (with or without a test, so the model cannot choose between a 0
and a mask); leave them out of training. ``swerl_llm_judge`` rows (pick
the correct fix among lettered candidates) score 1/0 by upstream's ``strict``/``lenient``
rules, whatever ``reward`` says (``gym_modes.py``).
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

from cascade_envs.core import Reward, Row
from cascade_envs.data import Prompt
from cascade_envs.judges import JudgedEnv, JudgeError
from cascade_envs.verifier_pool import VerifierLimit, VerifierPool
from cascade_envs.workers import WorkerError

from .edits import MAX_ANSWER_CHARS, MAX_EDITS
from .gym_modes import chosen_letter, reproduction_test
from .prompt import SCORE_SCALE, judge_messages, parse_judge_score, repair_messages
from .rows import AgentlessTask, ChoiceSpec, RepairSpec, ReproSpec, load_row
from .scoring import Outcome, score_repair

REWARDS = ("judge", "similarity")
TOP_K = 5
TIMEOUT_S = 30.0
INLINE_ANSWER_CHARS = 20_000
INLINE_FILE_CHARS = 200_000
INLINE_SIMILARITY_COST = 400_000
"""``len(reply) × len(reference change)`` under which the similarity runs inline (~15 ms at worst)."""


class AgentlessRepairEnv(JudgedEnv[AgentlessTask]):
    """Agentless repair scored by an LLM judge or by patch similarity; see the module docstring.

    ``reward``: ``"judge"`` or ``"similarity"`` (judge arguments are then ignored).
    ``top_k``: retrieved files shown besides the gold ones (this project's rows).
    ``format_error_reward``: the similarity reward of a format error (default -1).
    ``max_answer_chars``/``max_edits``: bounds on the parsed reply; ``timeout_s``: hard limit on
    scoring one reply in a worker; ``workers``: scoring processes (default up to 4).
    """

    default_tasks: ClassVar[str | None] = "bundled:agentless/samples.jsonl"
    max_episode_tokens = 98_304
    """The report's maximum sequence length for this stage (prompt + response)."""
    judge_max_tokens = 8192
    """Room for a reasoning judge (GPT-OSS-120B in the report) to think before its score."""

    def __init__(
        self,
        tasks: Any = None,
        *,
        reward: str = "judge",
        top_k: int = TOP_K,
        format_error_reward: float = -1.0,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        max_edits: int = MAX_EDITS,
        timeout_s: float = TIMEOUT_S,
        workers: int | None = None,
        **kwargs: Any,
    ):
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
        if top_k < 0 or max_edits < 1 or max_answer_chars < 1:
            raise ValueError("top_k must be >= 0, max_edits and max_answer_chars >= 1")
        self.reward_kind = reward
        self.top_k = int(top_k)
        self.format_error_reward = float(format_error_reward)
        self.max_answer_chars = int(max_answer_chars)
        self.max_edits = int(max_edits)
        self.verifier = VerifierPool(timeout_s=timeout_s, workers=workers, preload=(score_repair,))
        super().__init__(tasks, **kwargs)

    def uses_judge(self) -> bool:
        return self.reward_kind == "judge"

    def no_answer_value(self, task: AgentlessTask) -> float:
        """A repair with no visible reply is a format error (it makes no edit), as SWE-RL scores it."""
        return self._format_error_value() if isinstance(task.spec, RepairSpec) else 0.0

    def load_task(self, row: Row) -> AgentlessTask:
        prompt, spec = load_row(row, self.top_k)
        if prompt is None:  # a repair row of this project: the env writes its prompt
            assert isinstance(spec, RepairSpec)
            prompt = Prompt(tuple(repair_messages(spec)))
        return AgentlessTask(prompt, spec)

    async def ascore(self, task: AgentlessTask, answer: str) -> Reward:
        spec = task.spec
        if isinstance(spec, ChoiceSpec):
            return _score_choice(spec, answer)
        if isinstance(spec, ReproSpec):
            return _score_repro(spec, answer)
        return await self._score_repair(spec, answer)

    async def _score_repair(self, spec: RepairSpec, answer: str) -> Reward:
        similarity = self.reward_kind == "similarity"
        if len(answer) > self.max_answer_chars:
            return self._format_error(
                f"the reply has {len(answer)} characters, over the {self.max_answer_chars} parsed"
            )
        reference_chars = sum(map(len, spec.reference.values()))
        inline = (
            len(answer) <= INLINE_ANSWER_CHARS
            and sum(map(len, spec.files.values())) <= INLINE_FILE_CHARS
            and (not similarity or len(answer) * reference_chars <= INLINE_SIMILARITY_COST)
        )
        try:
            outcome: Outcome = await self.verifier.run(
                score_repair, spec, answer, similarity, self.max_answer_chars, self.max_edits, inline=inline
            )
        except VerifierLimit as exc:
            return Reward.zero(str(exc), reward_kind=self.reward_kind)
        except WorkerError as exc:
            return Reward.failed(f"scoring the edits failed: {exc}", reward_kind=self.reward_kind)
        if outcome.error is not None:
            return self._format_error(outcome.error)
        info: dict[str, Any] = {
            "format_error": 0.0,
            "reward_kind": self.reward_kind,
            "edits": outcome.edits,
            "files_changed": outcome.changed,
            "model_patch": outcome.patch,
        }
        if similarity:
            assert outcome.similarity is not None
            info["file_similarity"] = outcome.file_similarity
            return Reward(
                outcome.similarity, info, reason=f"similarity {outcome.similarity:.3f} to the reference"
            )
        touched = sorted(set(outcome.changed) | set(spec.reference))
        messages, quote = judge_messages(spec, outcome.patch, touched)
        try:
            score = await self.ajudge(messages, partial(parse_judge_score, quote=quote), quote)
        except JudgeError as exc:
            return await self.ablame(
                exc, spec.reference_patch, partial(self._control, spec), "judge: ", **info
            )
        info["judge_score"] = score
        return Reward(score / SCORE_SCALE, info, reason=f"judge score {score:g}/{SCORE_SCALE}")

    async def _control(self, spec: RepairSpec) -> float:
        """The control request: the task with the reference patch as the candidate (no policy text)."""
        messages, quote = judge_messages(spec, None, sorted(spec.reference))
        return await self.ajudge(messages, partial(parse_judge_score, quote=quote), quote)

    def _format_error(self, error: str) -> Reward:
        return Reward(
            self._format_error_value(),
            {"format_error": 1.0, "reward_kind": self.reward_kind},
            reason=f"format error: {error}",
        )

    def _format_error_value(self) -> float:
        return self.format_error_reward if self.reward_kind == "similarity" else 0.0

    async def aclose(self) -> None:
        """Stop the scoring workers, then close the judge."""
        try:
            await self.verifier.aclose()
        finally:
            await super().aclose()


def _score_choice(spec: ChoiceSpec, answer: str) -> Reward:
    letter = chosen_letter(answer, spec.letters, spec.grading_mode)
    info = {
        "expected_answer": "/".join(spec.gold),
        "extracted_answer": letter,
        "grading_mode": spec.grading_mode,
    }
    if letter is None:
        return Reward.zero(f"no option letter in a <solution> block ({spec.grading_mode})", **info)
    if letter not in spec.gold:
        return Reward.zero(f"chose {letter}, expected {'/'.join(spec.gold)}", **info)
    return Reward(1.0, info)


def _score_repro(spec: ReproSpec, answer: str) -> Reward:
    """Masked, whatever the answer: only running its test in the image could score it, and an answer
    without a test must not score 0 where one with a test is masked (the model would choose)."""
    test = reproduction_test(answer)
    image = f" ({spec.image})" if spec.image else ""
    return Reward.failed(
        f"repro-gen rows are scored by running the test in the instance's container image{image}, before "
        "and after the reference patch (exit code 2, then 0); this env runs no containers",
        test_script=test,
    )
