"""``cascade/GenRM-v0``: RLHF rewards from a generative reward model comparing a group's answers.

The G answers to one prompt are compared pair by pair by an LLM judge (the GenRM), which gives each
response of a pair a helpfulness score (1-5) and ranks the pair (1-6); ``aggregate.py`` turns the
verdicts into one reward per answer. Rows use NeMo Gym's ``genrm_compare`` layout
(``responses_create_params.input``, a conversation ending with a user turn; other keys are kept).
Thinking mode, as the report trains RLHF.

The judge is shown the conversation and the two final answers (reasoning split off); reasoning
length only feeds the conciseness terms. Defaults and where they come from:

- ``strategy="all_pairs"``: Nemotron-Cascade-2 (RLHF stage: all pairs of a prompt's rollouts are
  compared). NeMo Gym's default is ``"circular"``, also available. ``judges_per_pair=1`` (upstream
  ``num_judges_per_comparison``).
- Coefficients (``Coefficients``): ``reasoning_bonus=0.5``, ``answer_bonus=0.5``,
  ``top_fraction=0.2``, ``reasoning_length_coeff=0.3``, ``answer_length_coeff=0.35``: the RLHF stage
  of NVIDIA's public Nemotron 3 Super recipe (NeMo-RL ``examples/nemo_gym/nemotron-3-super/
  stage3_rlhf.yaml``, the ``genrm_compare`` block: ``reasoning_bonus``, ``answer_bonus``,
  ``top_percentile``, ``group_reasoning_length_penalty_coeff``, ``group_answer_length_penalty_coeff``);
  neither the Cascade-2 nor the Nano-v3 report publishes its values. Upstream's defaults are all 0.
- Judge sampling: ``max_tokens=16384``, ``temperature=0.6``, ``top_p=0.95`` (NeMo Gym
  ``genrm_compare.yaml`` and the same RLHF config); ``parse_retries=3`` (upstream
  ``genrm_parse_retries``): an unparseable reply is asked again, up to 3 more times.
- ``judge_timeout_s=600``: one attempt may generate 16K tokens of judge reasoning;
  ``group_timeout_s=1800`` bounds a group's scoring, including waits for the judge's concurrency
  slots (``judge_concurrency`` per endpoint, shared by every group of the env).

Answers the judge never sees (scored 0 as they are, ``Reward.zero``): one with nothing visible
after the reasoning (the kernel's no-answer rule: empty, whitespace or zero-width characters), one
over ``max_answer_chars`` (100,000 characters, about 25K tokens: two such answers, the
conversation and 16K tokens of judge output still fit a 128K-token judge context), and one
holding bytes that are not text (U+FFFD or NUL). In comparisons they stand as an empty response
(``"None"``, as upstream), so the other answer is still scored; two of them are never compared
with each other.

Rewards are on the judge's scale, as upstream: the mean score (1-5, which the tie shift can move by
up to 2.5 either way) plus the bonuses and length terms; GRPO normalises them per group. The 0 of an
answer the judge never saw is below every judged answer except one the judge tied at the lowest
score and ranked clearly worse (the tie shift can take that below 0).

Answers without a verdict (the rule of every judged env, ``cascade_envs.judges.fault``): an
answer is scored on the comparisons that gave a verdict. One with none scores 0, with the reason,
when each of its comparisons got a reply without a verdict (after the parse retries), the judge
gave verdicts elsewhere (other comparisons of the group, or else a control comparison of two
stand-ins, ``"None"`` against ``"None"`` on the same conversation, at most once per conversation
and ``judge_control_ttl_s``), and the failures are its own: each partner was judged elsewhere or is
a stand-in, or else this answer alone against a stand-in gets no verdict either (its solo control).
Otherwise it is masked with the reason (judge down, slow, rate-limited, the group deadline, a
judge that fails the control too, or failures its partners may have caused). A group whose every
answer derails the judge therefore scores 0s, not masks. Controls run only for answers left
without a verdict, within the group deadline. A group of one answer cannot be compared: it is
masked (answers the overlong rule cut are not in the group).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from functools import partial
from typing import Any, ClassVar, TypeVar

from cascade_envs.core import Message, Reward, Row, TaskError
from cascade_envs.data import Prompt
from cascade_envs.episode import Episode
from cascade_envs.judges import Failure, Health, JudgedEnv, JudgeError, JudgeReplyError, blame
from cascade_envs.judges.quoting import DEFENCES
from cascade_envs.reasoning import NO_ANSWER, has_visible_text, split_reasoning

from .aggregate import Coefficients, Outcome, RolloutScore, Verdict, aggregate_group, comparison_plan
from .prompt import (
    DEFAULT_TEMPLATE,
    EMPTY_RESPONSE,
    PROMPT_FORMATS,
    check_template,
    comparison_messages,
    parse_verdict,
)

MAX_ANSWER_CHARS = 100_000
NOT_TEXT = ("\ufffd", "\x00")
QUOTE_CHARS = 200
T = TypeVar("T")


class GenRMEnv(JudgedEnv[Prompt]):
    """Pairwise GenRM preference over a group's answers; see the module docstring. Its task is the row's ``Prompt``.

    ``strategy``: ``"all_pairs"`` or ``"circular"``; ``judges_per_pair``: judge samples per pair;
    the five ``Coefficients``; ``prompt_format``: ``"helpsteer3"`` or ``"roles"``;
    ``prompt_template``: replaces the HelpSteer3-style prompt; ``parse_retries``: extra judge calls
    after an unparseable reply; ``group_timeout_s``: the wall-clock bound of scoring one group;
    ``max_answer_chars``: longer answers score 0 unjudged. The judge arguments are ``JudgedEnv``'s.
    """

    default_tasks: ClassVar[str | None] = "bundled:genrm/samples.jsonl"
    scores_groups: ClassVar[bool] = True
    thinking = True
    judge_max_tokens = 16384
    judge_temperature = 0.6
    judge_top_p = 0.95

    def __init__(
        self,
        tasks: Any = None,
        *,
        strategy: str = "all_pairs",
        judges_per_pair: int = 1,
        reasoning_bonus: float = Coefficients.reasoning_bonus,
        answer_bonus: float = Coefficients.answer_bonus,
        top_fraction: float = Coefficients.top_fraction,
        reasoning_length_coeff: float = Coefficients.reasoning_length_coeff,
        answer_length_coeff: float = Coefficients.answer_length_coeff,
        prompt_format: str = "helpsteer3",
        prompt_template: str | None = None,
        parse_retries: int = 3,
        group_timeout_s: float = 1800.0,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        judge_timeout_s: float = 600.0,
        **kwargs: Any,
    ):
        comparison_plan(strategy, 2, judges_per_pair)  # validates both
        if prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"unknown prompt_format {prompt_format!r}; choose from {list(PROMPT_FORMATS)}")
        if prompt_template is not None and prompt_format != "helpsteer3":
            raise ValueError("prompt_template applies to prompt_format='helpsteer3' only")
        if parse_retries < 0 or not group_timeout_s > 0 or max_answer_chars < 1:
            raise ValueError("parse_retries must be >= 0, group_timeout_s > 0 and max_answer_chars >= 1")
        self.strategy, self.judges_per_pair = strategy, judges_per_pair
        self.coefficients = Coefficients(
            reasoning_bonus, answer_bonus, top_fraction, reasoning_length_coeff, answer_length_coeff
        )
        self.prompt_format = prompt_format
        self.prompt_template = (
            check_template(prompt_template) if prompt_template is not None else DEFAULT_TEMPLATE
        )
        self.parse_retries = parse_retries
        self.group_timeout_s = float(group_timeout_s)
        self.max_answer_chars = max_answer_chars
        super().__init__(tasks, judge_timeout_s=judge_timeout_s, **kwargs)

    def load_task(self, row: Row) -> Prompt:
        task = Prompt.of(row)
        messages = task.messages
        if messages[-1]["role"] != "user":
            params = row.get("responses_create_params")
            field = (
                "responses_create_params.input"
                if isinstance(params, dict) and "input" in params
                else "messages"
            )
            raise TaskError(
                f"the conversation must end with a user turn, not {messages[-1]['role']!r}: "
                "the judge compares answers to it",
                field,
            )
        return task

    # ----- scoring a group ----------------------------------------------------------------------

    async def ascore_group(
        self, task: Prompt, answers: list[str], episodes: list[Episode[Prompt]]
    ) -> list[Reward]:
        unjudged = {i: reason for i, answer in enumerate(answers) if (reason := self._unjudgeable(answer))}
        candidates = [i for i in range(len(answers)) if i not in unjudged]
        if len(answers) == 1 and candidates:
            return [
                Reward.failed(
                    "a group of one answer cannot be compared: GenRM needs at least 2 "
                    "finished answers per prompt (group_size >= 2)"
                )
            ]
        deadline = asyncio.get_running_loop().time() + self.group_timeout_s
        scores: dict[int, RolloutScore] = {}
        rewards: dict[int, Reward] = {}
        if candidates:
            conversation = self.prompt(task)
            shown = [EMPTY_RESPONSE if i in unjudged else answer for i, answer in enumerate(answers)]
            plan = [
                (i, j)
                for i, j in comparison_plan(self.strategy, len(answers), self.judges_per_pair)
                if i in candidates or j in candidates
            ]
            outcomes = await self._judge_all(conversation, shown, plan, deadline)
            reasoning = {i: len(split_reasoning(episodes[i].final).reasoning) for i in candidates}
            lengths = {i: len(answers[i].strip()) for i in candidates}
            scores = aggregate_group(outcomes, candidates, reasoning, lengths, self.coefficients)
            rewards = await self._weigh_unscored(conversation, shown, scores, outcomes, deadline)
        return [
            Reward.zero(unjudged[i])
            if i in unjudged
            else rewards[i]
            if i in rewards
            else _reward(scores[i], self.strategy)
            for i in range(len(answers))
        ]

    def _unjudgeable(self, answer: str) -> str | None:
        """Why the judge must not see ``answer`` (it then scores 0), or ``None``."""
        if not has_visible_text(answer):
            return NO_ANSWER
        if len(answer) > self.max_answer_chars:
            return (
                f"verifier limit: the answer has {len(answer):,} characters, "
                f"over max_answer_chars={self.max_answer_chars:,}"
            )
        if any(mark in answer for mark in NOT_TEXT):
            return "the answer holds bytes that are not text (U+FFFD or NUL): malformed output is not judged"
        return None

    async def _judge_all(
        self, conversation: list[Message], shown: Sequence[str], plan: list[tuple[int, int]], deadline: float
    ) -> list[Outcome]:
        """Every comparison of ``plan``, concurrently, until the group deadline; the late ones fail."""
        calls = [self._compare(conversation, shown, i, j) for i, j in plan]
        results = await _until(calls, deadline, self.group_timeout_s)
        return [
            result if isinstance(result, Outcome) else Outcome(i, j, failure=result.detail, kind=result.kind)
            for result, (i, j) in zip(results, plan, strict=True)
        ]

    async def _weigh_unscored(
        self,
        conversation: list[Message],
        shown: Sequence[str],
        scores: dict[int, RolloutScore],
        outcomes: list[Outcome],
        deadline: float,
    ) -> dict[int, Reward]:
        """``judges.fault`` for each answer left without a verdict, with the controls it needs: the
        judge's health (other comparisons, else the stand-in control), then, where the partners
        leave the fault open, the answer alone against a stand-in; all within the group deadline."""
        unscored = {i: s for i, s in scores.items() if s.status == "unscored"}
        weighed = [
            i
            for i, s in unscored.items()
            if DEFENCES.blame and all(o.kind == "reply" for o in s.failed_outcomes)
        ]
        health: Health | None = None
        alone: dict[int, Verdict | Failure] = {}
        if weighed:
            health = await self._health(conversation, outcomes, deadline)
            solo = [i for i in weighed if not unscored[i].partners_judged]
            if health.ok and solo:
                calls = [self._control(conversation, shown[i]) for i in solo]
                alone = dict(zip(solo, await _until(calls, deadline, self.group_timeout_s), strict=True))
        rewards = {}
        for i, score in unscored.items():
            failures = [Failure(o.kind or "judge", o.failure or "no verdict") for o in score.failed_outcomes]
            result = alone.get(i)
            if isinstance(result, Failure) and result.kind != "reply":
                failures.append(result)  # the solo control failed for the judge's reasons: a mask
            isolated = score.partners_judged or isinstance(result, Failure)
            rewards[i] = blame(
                failures, health if i in weighed else None, isolated=isolated, **_components(score)
            )
        return rewards

    async def _health(self, conversation: list[Message], outcomes: list[Outcome], deadline: float) -> Health:
        """Whether the judge gives verdicts on this conversation: the group's other comparisons, or
        else a control comparison of two stand-ins (``self.canary``)."""
        judged = sum(o.verdict is not None for o in outcomes)
        if judged:
            many = "s" if judged > 1 else ""
            return Health(True, f"gave verdicts on {judged} other comparison{many} of the group")
        key = ("genrm", self.prompt_format, self.prompt_template, json.dumps(conversation, sort_keys=True))
        check = self.canary.check(key, partial(self._control, conversation, None))
        (result,) = await _until([check], deadline, self.group_timeout_s)
        return result if isinstance(result, Health) else Health(False, result.detail)

    async def _control(self, conversation: list[Message], answer: str | None) -> Verdict:
        """A control comparison: ``answer`` (``None``: a stand-in too) against a stand-in, asked as
        the plan's comparisons are; raises ``JudgeError`` when it gives no verdict."""
        first = EMPTY_RESPONSE if answer is None else answer
        outcome = await self._compare(conversation, [first, EMPTY_RESPONSE], 0, 1)
        if outcome.verdict is None:
            error = JudgeReplyError if outcome.kind == "reply" else JudgeError
            raise error(outcome.failure or "no verdict")
        return outcome.verdict

    async def _compare(self, conversation: list[Message], shown: Sequence[str], i: int, j: int) -> Outcome:
        """One comparison: answer ``i`` as response 1, ``j`` as response 2; unparseable replies are
        asked again up to ``parse_retries`` times."""
        untrusted = tuple(text for k, text in ((i, shown[i]), (j, shown[j])) if text != EMPTY_RESPONSE)
        messages, quote = comparison_messages(
            conversation,
            shown[i],
            shown[j],
            prompt_format=self.prompt_format,
            template=self.prompt_template,
            untrusted=untrusted,
        )
        problem = ""
        for _ in range(self.parse_retries + 1):
            try:
                reply = await self.ajudge(messages, str, top_p=self.judge_top_p)
            except JudgeError as exc:
                return Outcome(i, j, failure=str(exc), kind=Failure.of(exc).kind)
            try:
                return Outcome(i, j, verdict=parse_verdict(reply, quote))
            except ValueError as exc:
                problem = f"unparseable judge reply ({exc}): {_quote(reply)}"
        replies = self.parse_retries + 1
        return Outcome(
            i, j, failure=f"{problem} [{replies} repl{'y' if replies == 1 else 'ies'}]", kind="reply"
        )


async def _until(calls: Sequence[Awaitable[T]], deadline: float, limit_s: float) -> list[T | Failure]:
    """Each call's result, concurrently, until ``deadline`` (loop time); a call still running then is
    cancelled (a "deadline" failure), one that raised ``JudgeError`` is a failure of its kind."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        if tasks:
            await asyncio.wait(tasks, timeout=max(0.0, deadline - asyncio.get_running_loop().time()))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    results: list[T | Failure] = []
    for task in tasks:
        if task.cancelled():
            late = f"the group deadline of {limit_s:g} s passed before this comparison finished"
            results.append(Failure("deadline", late))
        elif isinstance(error := task.exception(), JudgeError):
            results.append(Failure.of(error))
        elif error is not None:
            results.append(Failure("judge", f"{type(error).__name__}: {error}"))
        else:
            results.append(task.result())
    return results


def _components(score: RolloutScore) -> dict[str, Any]:
    components: dict[str, Any] = {
        "comparisons": score.compared,
        "failed_comparisons": score.failed,
        "tie_breaks": score.tie_breaks,
    }
    if score.failures:
        components["failures"] = score.failures[:3]
    return components


def _reward(score: RolloutScore, strategy: str) -> Reward:
    components = _components(score)
    if score.value is not None and score.base is not None:
        components.update(
            base_score=score.base, conciseness_bonus=score.bonus, length_adjustment=score.length_adjustment
        )
        reason = f"mean judge score {score.base:.3g} over {score.compared} {strategy} comparisons"
        return Reward(score.value, components, reason=reason)
    return Reward.failed(score.reason or "no verdict", **components)


def _quote(reply: str) -> str:
    start = reply[:QUOTE_CHARS]
    return repr(start) + (f" ... ({len(reply)} chars)" if len(reply) > QUOTE_CHARS else "")
