"""Trajectories: one training sequence per episode with env tokens masked, the per-turn fallback,
and the runner's episode limits (deadline, token budget, context overflow)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cascade_envs.rollout import RolloutRunner
from cascade_envs.trajectory import Trajectory, TurnRecord
from tests.toy_envs import CharTemplatePolicy, LookupToolEnv, register_toy_envs

TASK = {"id": "t", "prompt": "What is 2+2?", "answer": "4"}
CALL = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'


@pytest.fixture(autouse=True)
def _toys():
    import cascade_envs

    register_toy_envs()
    cascade_envs.register("toy/LookupToolLong-v0", LookupToolEnv, max_turns=99)


def tool_then_answer(calls: int):
    def reply(messages):
        used = sum(m["role"] == "tool" for m in messages)
        return CALL if used < calls else "The answer is 4"

    return reply


def play(policy, env_id="toy/LookupTool-v0", task=TASK, group_size=1, **runner_kwargs):
    async def go():
        async with RolloutRunner(policy, group_size=group_size, **runner_kwargs) as runner:
            return await runner.arun([(env_id, task)])

    return asyncio.run(go())[0].episodes


def test_a_multi_turn_episode_is_one_sequence_with_env_tokens_masked():
    (episode,) = play(CharTemplatePolicy(tool_then_answer(2)))
    assert episode.turns == 3 and episode.terminated and episode.reward.value == 1.0
    (seq,) = episode.trajectory.sequences()
    transcript = CharTemplatePolicy.render(episode.messages, generation_prompt=False)
    assert "".join(map(chr, seq.prompt_ids + seq.response_ids)) == transcript
    trained = "".join(chr(t) for t, m in zip(seq.response_ids, seq.loss_mask, strict=True) if m)
    assert trained == f"{CALL}</>{CALL}</>The answer is 4</>"  # exactly the policy's tokens
    masked = "".join(chr(t) for t, m in zip(seq.response_ids, seq.loss_mask, strict=True) if not m)
    assert masked == "<tool>4</><assistant><tool>4</><assistant>"  # tool results and template tokens
    assert seq.logprobs is not None and len(seq.logprobs) == len(seq.response_ids)
    assert all(lp == 0.0 for lp, m in zip(seq.logprobs, seq.loss_mask, strict=True) if not m)
    assert episode.trajectory.training_tokens() == len(transcript)
    assert [t.finish_reason for t in episode.trajectory.turns] == ["stop"] * 3


def test_a_history_that_is_not_a_prefix_falls_back_to_per_turn_sequences_and_says_so_once(caplog):
    class Rewriting(CharTemplatePolicy):
        async def agenerate(self, messages, **kwargs):
            # a template that rewrites earlier assistant turns (e.g. drops their reasoning)
            rewritten = [
                {**m, "content": m["content"].upper()} if m["role"] == "assistant" else m for m in messages
            ]
            return await super().agenerate(rewritten, **kwargs)

    with caplog.at_level(logging.WARNING, logger="cascade_envs.rollout"):
        episodes = play(Rewriting(tool_then_answer(2)), group_size=2)
    for episode in episodes:
        assert episode.trajectory.prefix_broken_at == 1
        seqs = episode.trajectory.sequences()
        assert len(seqs) == 3 and all(all(s.loss_mask) for s in seqs)
    assert caplog.text.count("one sequence per turn") == 1


def test_trajectory_without_token_ids_has_no_sequences():
    trajectory = Trajectory([TurnRecord(None, None, None, "stop")])
    assert not trajectory.has_tokens and trajectory.sequences() == []


def test_context_overflow_after_the_first_turn_truncates_with_the_env_rule():
    prompt = len(CharTemplatePolicy.render(LookupToolEnv().prompt(LookupToolEnv().load_task(TASK))))
    (episode,) = play(CharTemplatePolicy(tool_then_answer(5), context=prompt + 60))
    assert episode.truncated and not episode.terminated and episode.error is None
    assert not episode.reward.masked and episode.reward.value == 0.0
    assert "context overflow" in episode.reward.reason
    assert len(episode.trajectory.sequences()) == 1


def test_a_prompt_that_does_not_fit_at_all_is_an_error_not_a_zero():
    (episode,) = play(CharTemplatePolicy(tool_then_answer(0), context=10))
    assert episode.reward.masked and "ContextOverflowError" in episode.error


def test_episode_deadline_truncates():
    policy = CharTemplatePolicy(tool_then_answer(50), delay_s=0.05)
    (episode,) = play(policy, env_id="toy/LookupToolLong-v0", episode_timeout_s=0.3)
    assert episode.truncated and "deadline of 0.3 s" in episode.reward.reason and not episode.reward.masked
    assert 1 <= episode.turns <= 6 and episode.elapsed_s < 1.0


def test_env_settings_override_the_runner_defaults():
    import cascade_envs

    cascade_envs.register("toy/LookupToolFast-v0", LookupToolEnv, episode_timeout_s=0.2, max_turns=99)
    (episode,) = play(
        CharTemplatePolicy(tool_then_answer(50), delay_s=0.05),
        env_id="toy/LookupToolFast-v0",
        episode_timeout_s=60,
    )
    assert episode.truncated and "deadline of 0.2 s" in episode.reward.reason


def test_token_budget_truncates():
    budget = len(CharTemplatePolicy.render(LookupToolEnv().prompt(LookupToolEnv().load_task(TASK)))) + 300
    policy = CharTemplatePolicy(tool_then_answer(50))
    (episode,) = play(policy, env_id="toy/LookupToolLong-v0", max_episode_tokens=budget)
    assert episode.truncated and f"token budget of {budget}" in episode.reward.reason
    last = episode.trajectory.turns[-1]
    assert len(last.prompt_ids) + len(last.completion_ids) >= budget
    before = episode.trajectory.turns[-2]
    assert len(before.prompt_ids) + len(before.completion_ids) < budget


def test_turn_limit_truncates_with_the_turn_count():
    (episode,) = play(CharTemplatePolicy(tool_then_answer(50)))
    assert episode.truncated and episode.turns == 3 and "turn limit of 3" in episode.reward.reason


def test_results_file_stores_each_response_once(tmp_path):
    import json

    text = "x" * 50_000

    def reply(messages):
        return text

    out = tmp_path / "results.jsonl"
    play(CharTemplatePolicy(reply), env_id="toy/ExactAnswer-v0", results_path=out)
    line = out.read_text()
    assert line.count(text) == 1
    record = json.loads(line)
    assert record["trajectory"]["turns"][0]["finish_reason"] == "stop"
