"""Training tokens of a long multi-turn episode: one sequence per episode vs one per turn.

A scripted policy plays a 50-turn tool-calling episode (49 tool calls, then an answer) through the
``RolloutRunner``, tokenising with the embedded model's real chat template (SmolLM2, thinking mode,
whose rendered history is a prefix of the next prompt). Printed side by side: the tokens of the
final transcript, the tokens the trainer runs over with our trajectories (one sequence, env tokens
masked), and with one sequence per turn (each turn's whole prompt again: O(T²)), with the ratios.

    python bench/bench_trajectory.py [--turns 50]
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from cascade_envs import Completion, Env, Episode, Reward, Turn, register
from cascade_envs.policy import render_chat_prompt
from cascade_envs.rollout import RolloutRunner

CALL = '<tool_call>{"name": "read_file", "arguments": {"path": "src/module.py"}}</tool_call>'
RESULT = "def handler(request):\n    return process(request.body)  # line {n}\n" * 3


class ToolLoopEnv(Env):
    """Answers every tool call with a short file excerpt; the episode ends on a reply without one."""

    max_turns = 10_000

    async def aturn(self, episode: Episode, completion: Completion) -> Turn:
        if "<tool_call>" in completion:
            return Turn([{"role": "tool", "content": RESULT.format(n=episode.turns)}])
        return Turn(done=True)

    async def ascore(self, task: Any, answer: str) -> Reward:
        return Reward(1.0)


class TokenizerPolicy:
    """Scripted replies, tokenised like a local engine: chat template for the prompt, text + EOS."""

    def __init__(self, tokenizer: Any, turns: int):
        self.tok, self.turns = tokenizer, turns
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def agenerate(self, messages, *, sampling, thinking=True):
        calls = sum(m["role"] == "tool" for m in messages)
        text = CALL if calls < self.turns - 1 else "The handler forwards the request body."
        prompt = self.tok(render_chat_prompt(self.tok, messages, thinking), add_special_tokens=False)[
            "input_ids"
        ]
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.eos]
        return Completion(text, "stop", ids, [-0.1] * len(ids), prompt)

    async def aclose(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from cascade_envs.policies.embedded import embedded_model_path

    tok = AutoTokenizer.from_pretrained(str(embedded_model_path()), local_files_only=True)
    register("bench/ToolLoop-v0", ToolLoopEnv)
    task = {"id": "t", "prompt": "Find where the request body is processed."}

    async def play() -> Any:
        async with RolloutRunner(TokenizerPolicy(tok, args.turns)) as runner:
            return (await runner.arun([("bench/ToolLoop-v0", task)]))[0].episodes[0]

    episode = asyncio.run(play())
    transcript = len(tok(render_chat_prompt(tok, episode.messages), add_special_tokens=False)["input_ids"])
    ours = episode.trajectory.training_tokens()
    per_turn = sum(len(t.prompt_ids) + len(t.completion_ids) for t in episode.trajectory.turns)
    assert len(episode.trajectory.sequences()) == 1, "the template broke the prefix property"
    trained = sum(episode.trajectory.sequences()[0].loss_mask)
    print(f"{episode.turns}-turn episode, SmolLM2 chat template (thinking mode)")
    print(f"{'':<40}{'tokens':>10}{'vs transcript':>15}")
    print(f"{'final transcript':<40}{transcript:>10}{1.0:>14.2f}x")
    print(f"{'ours: one sequence, env tokens masked':<40}{ours:>10}{ours / transcript:>14.2f}x")
    print(f"{'one sequence per turn (O(T^2))':<40}{per_turn:>10}{per_turn / transcript:>14.2f}x")
    print(f"policy tokens with loss: {trained}; per-turn / ours: {per_turn / ours:.1f}x")


if __name__ == "__main__":
    main()
