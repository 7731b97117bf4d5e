import asyncio
import json

import pytest

from cascade_envs.policies import make_policy
from cascade_envs.policies.openai import OpenAIChatPolicy, parse_chat_completion
from cascade_envs.rollout import PolicyError, RolloutRunner, SamplingParams
from cascade_envs.rollout.metrics import MixMetrics
from cascade_envs.testing import ScriptedPolicy

TASKS = [{"id": f"t{i}", "prompt": f"Say {i}. ANSWER: {i}", "answer": str(i)} for i in range(6)]
ITEMS = [("toy/ExactAnswer-v0", t) for t in TASKS]


def run(server, model, items=ITEMS, **kw):
    policy = OpenAIChatPolicy(server.url, model=model, timeout_s=kw.pop("timeout_s", 5.0), backoff_s=0.01)

    async def go():
        try:
            return await RolloutRunner(policy, **kw).arun(items)
        finally:
            await policy.aclose()

    return asyncio.run(go())


def read_results(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_groups_are_scored_and_every_episode_is_written(chat_server, tmp_path):
    out = tmp_path / "r.jsonl"
    groups = run(chat_server, "echo-answer", group_size=3, results_path=out)
    assert [g.task_id for g in groups] == [t["id"] for t in TASKS]
    assert all(g.rewards == [1.0, 1.0, 1.0] for g in groups)
    episode = groups[0].episodes[0]
    assert episode.response.logprobs == [-0.5] and episode.response.token_ids == [0]
    assert episode.response.prompt_token_ids == [1, 2, 3] and episode.response.finish_reason == "stop"
    rows = read_results(out)
    assert len(rows) == 18 and {r["task_id"] for r in rows} == {t["id"] for t in TASKS}
    assert rows[0]["messages"][-1]["role"] == "assistant"


def test_request_carries_sampling_and_thinking(chat_server):
    policy_items = [("toy/ExactAnswer-v0", TASKS[0])]
    run(
        chat_server,
        "echo-answer",
        items=policy_items,
        sampling=SamplingParams(64, 0.7, 0.9, seed=5, stop=["\n\n"]),
    )
    request = chat_server.requests[-1]
    assert (request["max_tokens"], request["temperature"], request["top_p"], request["seed"]) == (
        64,
        0.7,
        0.9,
        5,
    )
    assert request["stop"] == ["\n\n"] and request["chat_template_kwargs"] == {"enable_thinking": True}


def test_a_seeded_run_gives_every_episode_its_own_seed(chat_server):
    """One seed for every request would make a seeded server return the same sample G times."""
    run(
        chat_server,
        "echo-answer",
        items=ITEMS[:2],
        group_size=3,
        sampling=SamplingParams(16, 1.0, 1.0, seed=7),
    )
    seeds = sorted(r["seed"] for r in chat_server.requests[-6:])
    assert seeds == [7, 8, 9, 10, 11, 12]


def test_retries_recover_from_503(chat_server):
    groups = run(chat_server, "flaky-2", group_size=1)
    assert all(g.rewards == [1.0] for g in groups)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("error-500", "HTTP 500"),
        ("garbage", "malformed JSON"),
        ("no-choices", "no choices"),
        ("slow", "within the deadline"),
    ],
)
def test_policy_failures_are_masked_and_nothing_is_lost(chat_server, tmp_path, model, message):
    out = tmp_path / "r.jsonl"
    items = ITEMS[:2]
    groups = run(chat_server, model, items=items, group_size=2, results_path=out, timeout_s=0.5)
    episodes = [e for g in groups for e in g.episodes]
    assert len(episodes) == 4
    for e in episodes:
        assert e.reward.masked and message in e.error and "PolicyError" in e.error
    rows = read_results(out)
    assert len(rows) == 4 and all(r["reward_info"]["masked"] for r in rows)
    table = MixMetrics().add_groups(groups).table()
    assert "n/a" in table  # no scored episode, so no mean reward


def test_huge_response_is_scored(chat_server):
    groups = run(chat_server, "huge", items=ITEMS[:1])
    episode = groups[0].episodes[0]
    assert (
        len(episode.response) == 4 * 1024 * 1024 and episode.reward.value == 0.0 and not episode.reward.masked
    )


def test_bad_task_rows_are_recorded_not_dropped(chat_server, tmp_path):
    out = tmp_path / "r.jsonl"
    items = [ITEMS[0], ("toy/ExactAnswer-v0", {"prompt": "no answer field"}), ("toy/Unknown-v0", TASKS[1])]
    groups = run(chat_server, "echo-answer", items=items, results_path=out)
    assert groups[0].rewards == [1.0]
    assert "TaskError" in groups[1].episodes[0].error and groups[1].episodes[0].reward.masked
    assert "unknown environment" in groups[2].episodes[0].error
    assert len(read_results(out)) == 3


def test_multi_turn_episode_over_http(chat_server):
    groups = run(chat_server, "tool-user", items=[("toy/LookupTool-v0", TASKS[4])])
    episode = groups[0].episodes[0]
    assert episode.turns == 2 and episode.reward.value == 1.0 and episode.terminated
    assert [m["role"] for m in episode.messages] == ["system", "user", "assistant", "tool", "assistant"]


def test_group_scoring_envs_are_rescored_together(chat_server):
    tasks = [{"id": "g", "prompt": "ANSWER: long answer here", "answer": "x"}]
    groups = run(chat_server, "echo-answer", items=[("toy/LongestWins-v0", tasks[0])], group_size=3)
    assert groups[0].rewards == [1.0, 1.0, 1.0]
    assert groups[0].episodes[0].reward.components == {"length": len("long answer here")}


def test_verifier_errors_are_masked_per_episode(chat_server):
    groups = run(chat_server, "echo-answer", items=[("toy/BrokenVerifier-v0", TASKS[0])], group_size=2)
    assert all(e.reward.masked and "judge server unreachable" in e.reward.error for e in groups[0].episodes)


def test_concurrency_limit_is_respected():
    active = peak = 0

    async def counting(messages):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        return "0"

    items = [("toy/ExactAnswer-v0", t) for t in TASKS] * 5
    RolloutRunner(ScriptedPolicy(counting), concurrency=4, group_size=2).run(items)
    assert peak == 4


def test_model_name_is_discovered_from_the_server(chat_server):
    async def go():
        policy = OpenAIChatPolicy(chat_server.url)
        try:
            return await policy.agenerate(
                [{"role": "user", "content": "ANSWER: hi"}], sampling=SamplingParams()
            )
        finally:
            await policy.aclose()

    assert asyncio.run(go()) == "hi"


def test_dead_server_is_a_policy_error():
    async def go():
        policy = OpenAIChatPolicy("http://127.0.0.1:9/v1", model="m", max_retries=1, backoff_s=0.01)
        try:
            await policy.agenerate([{"role": "user", "content": "x"}], sampling=SamplingParams())
        finally:
            await policy.aclose()

    with pytest.raises(PolicyError, match="connection failed"):
        asyncio.run(go())


def test_reasoning_content_is_kept_in_the_completion():
    data = {
        "choices": [{"message": {"content": "B", "reasoning_content": "think"}, "finish_reason": "length"}]
    }
    completion = parse_chat_completion(data)
    assert completion == "<think>think</think>B" and completion.truncated


def test_unknown_policy_spec():
    with pytest.raises(Exception, match="unknown policy"):
        make_policy("ftp://x")
