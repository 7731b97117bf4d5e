"""One scoring path: groups are the unit of scoring, each answer is scored once, reasoning never
reaches a scorer, overlong answers and answers with nothing visible never reach one, failures
mask (DESIGN.md §2)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import cascade_envs
from cascade_envs import Reward
from cascade_envs.core import Completion
from cascade_envs.reasoning import NO_ANSWER
from cascade_envs.rollout import RolloutRunner
from tests.toy_envs import CharTemplatePolicy, ExactAnswerEnv

CALLS: list[tuple[str, Any]] = []
MADE: list[str] = []


class RecordingEnv(ExactAnswerEnv):
    """Per-sample scorer that records every answer it is asked to score."""

    def __init__(self, *args: Any, **kwargs: Any):
        MADE.append(type(self).__name__)
        super().__init__(*args, **kwargs)

    async def ascore(self, task: dict[str, Any], answer: str) -> Reward:
        CALLS.append(("ascore", answer))
        return await super().ascore(task, answer)


class RecordingGroupEnv(RecordingEnv):
    """Group scorer: the shortest answer wins; records each call with the answers it saw."""

    scores_groups = True

    async def ascore_group(self, task, answers, episodes):
        CALLS.append(("group", list(answers)))
        assert [len(e.completions) for e in episodes] == [1] * len(answers)  # the full episodes come along
        best = min(len(a) for a in answers)
        return [Reward(float(len(a) == best)) for a in answers]


class FailingGroupEnv(RecordingGroupEnv):
    async def ascore_group(self, task, answers, episodes):
        CALLS.append(("group", list(answers)))
        raise ConnectionError("judge server unreachable")


@pytest.fixture(autouse=True)
def _registered():
    CALLS.clear()
    MADE.clear()
    for cls in (RecordingEnv, RecordingGroupEnv, FailingGroupEnv):
        cascade_envs.register(f"rec/{cls.__name__}-v0", cls)


TASKS = [{"id": f"t{i}", "prompt": f"q{i}", "answer": "yes"} for i in range(3)]
# four samples per group: a right answer with reasoning, a wrong one, a cut one, an unterminated think
REPLIES = ["<think>hmm</think>yes", "<think>no idea</think>nope", "yes but cut", "<think>never closed yes"]


def scripted_policy() -> CharTemplatePolicy:
    counter = iter(range(10_000))
    state: dict[int, int] = {}

    def pick(messages):
        state["n"] = next(counter)
        return REPLIES[state["n"] % 4]

    def finish(messages):
        return "length" if state["n"] % 4 == 2 else "stop"

    return CharTemplatePolicy(pick, finish=finish)


def run(env_id: str, group_size: int = 4):
    async def go():
        async with RolloutRunner(scripted_policy(), group_size=group_size, concurrency=1) as runner:
            return await runner.arun([(env_id, t) for t in TASKS])

    return asyncio.run(go())


def test_per_sample_scorer_is_called_once_per_scorable_episode_with_the_answer_only():
    groups = run("rec/RecordingEnv-v0")
    assert MADE == ["RecordingEnv"]  # one env instance serves the whole run
    # 3 groups x 4 samples; the cut and the unterminated answers never reach the scorer
    assert sorted(CALLS) == sorted([("ascore", "yes"), ("ascore", "nope")] * 3)
    for group in groups:
        values = [(e.reward.value, e.reward.masked) for e in group.episodes]
        assert values == [(1.0, False), (0.0, False), (0.0, False), (0.0, False)]
        assert group.episodes[2].reward.components["overlong"] == 1.0
        assert "never closed" in group.episodes[3].reward.reason


def test_group_scorer_is_called_once_per_group_with_think_stripped_answers():
    groups = run("rec/RecordingGroupEnv-v0")
    assert CALLS == [("group", ["yes", "nope"])] * 3
    for group in groups:
        assert group.rewards == [1.0, 0.0, 0.0, 0.0]
        assert "overlong" in group.episodes[2].reward.reason


def test_a_failing_group_scorer_masks_the_group_with_its_error():
    groups = run("rec/FailingGroupEnv-v0")
    assert len(CALLS) == 3
    for group in groups:
        scored = group.episodes[:2]
        assert all(e.reward.masked and "judge server unreachable" in e.reward.error for e in scored)
        assert all(
            not e.reward.masked and e.reward.value == 0.0 for e in group.episodes[2:]
        )  # overlong stays 0


def test_group_env_step_gives_no_provisional_reward():
    env = RecordingGroupEnv()
    env.reset(options={"task": TASKS[0]})
    _, value, terminated, _, info = env.step("yes")
    assert terminated and info["reward"] is None and value == 0.0 and CALLS == []
    rewards = asyncio.run(env.ascore_responses(TASKS[0], ["<think>x</think>yes", "a longer answer"]))
    assert [r.value for r in rewards] == [1.0, 0.0] and CALLS == [("group", ["yes", "a longer answer"])]


def test_per_sample_step_scores_through_the_same_path():
    env = RecordingEnv()
    env.reset(options={"task": TASKS[0]})
    assert env.step(Completion("<think>r</think>yes"))[1] == 1.0
    env.reset(options={"task": TASKS[0]})
    _, value, _, _, info = env.step(Completion("yes", finish_reason="length"))
    assert value == 0.0 and "overlong" in info["reward"].reason
    assert CALLS == [("ascore", "yes")]


def test_a_group_scorer_returning_the_wrong_count_masks():
    class Short(RecordingGroupEnv):
        async def ascore_group(self, task, answers, episodes):
            return [Reward(1.0)]

    rewards = asyncio.run(Short().ascore_responses(TASKS[0], ["a", "b"]))
    assert all(r.masked and "returned 1 rewards for 2 answers" in r.error for r in rewards)


NOTHING_VISIBLE = [
    "<think>yes</think>",
    "\u200b\u2060\ufeff",
    "<think>r</think>\u3164 \u00ad\n",
    "<THINK>yes</THINK>",
]


def test_a_reply_with_nothing_visible_scores_no_answer_and_never_reaches_the_scorer():
    env = RecordingEnv()
    rewards = asyncio.run(env.ascore_responses(TASKS[0], [*NOTHING_VISIBLE, "<think>r</think>yes"]))
    assert [(r.value, r.masked, r.reason) for r in rewards] == [(0.0, False, NO_ANSWER)] * 4 + [
        (1.0, False, None)
    ]
    assert asyncio.run(env.areward(TASKS[0], "\u200b")).reason == NO_ANSWER  # the runner's one-episode path
    assert CALLS == [("ascore", "yes")]


def test_a_group_scorer_sees_a_reply_with_nothing_visible_as_empty_and_cannot_pay_it():
    class PaysAll(RecordingGroupEnv):
        async def ascore_group(self, task, answers, episodes):
            CALLS.append(("group", list(answers)))
            return [Reward(1.0) for _ in answers]

    rewards = asyncio.run(PaysAll().ascore_responses(TASKS[0], ["yes", "\u200b\u200b", "<think>x</think>"]))
    assert CALLS == [("group", ["yes", "", ""])]
    assert [(r.value, r.reason) for r in rewards] == [(1.0, None), (0.0, NO_ANSWER), (0.0, NO_ANSWER)]
    failed = asyncio.run(FailingGroupEnv().ascore_responses(TASKS[0], ["yes", "\u200b"]))
    assert failed[0].masked and (failed[1].masked, failed[1].reason) == (False, NO_ANSWER)


def test_an_env_may_pay_no_answer_below_zero_but_never_above():
    class Penalised(RecordingEnv):
        value = -1.0

        def no_answer_value(self, task):
            return self.value

    env = Penalised()
    assert asyncio.run(env.areward(TASKS[0], " ")).value == -1.0
    env.value = 2.0
    assert asyncio.run(env.areward(TASKS[0], " ")).value == 0.0


EVENTS: list[str] = []


class Stateful(ExactAnswerEnv):
    """Keeps per-episode state in ``episode.state``; scores from it."""

    async def on_reset(self, episode):
        episode.state = {"db": episode.task.answer}
        EVENTS.append("reset")

    async def ascore_episode(self, episode, answer):
        return Reward(float(answer == episode.state["db"]))

    async def on_end(self, episode):
        EVENTS.append(f"end:{episode.state['db']}")


def test_on_reset_and_on_end_hooks_bracket_each_episode():
    EVENTS.clear()
    cascade_envs.register("rec/Stateful-v0", Stateful)

    async def go():
        async with RolloutRunner(CharTemplatePolicy(lambda m: "yes"), group_size=2) as runner:
            return await runner.arun([("rec/Stateful-v0", TASKS[0])])

    (group,) = asyncio.run(go())
    assert group.rewards == [1.0, 1.0]
    assert sorted(EVENTS) == ["end:yes", "end:yes", "reset", "reset"]
