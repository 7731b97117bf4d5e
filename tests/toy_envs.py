"""Small but real environments used by the kernel tests."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cascade_envs import Env, Episode, Prompt, Reward, Row, TaskError, Turn
from cascade_envs.core import Completion
from cascade_envs.policy import ContextOverflowError
from cascade_envs.testing import ScriptedPolicy


@dataclass(frozen=True)
class ExactTask:
    prompt: Prompt
    answer: str


class ExactAnswerEnv(Env[ExactTask]):
    """Reward 1 when the final answer equals the task's ``answer`` (after stripping)."""

    def load_task(self, row: Row) -> ExactTask:
        prompt = Prompt.of(row)
        if not isinstance(row.get("answer"), str):
            raise TaskError("expected a string", "answer")
        return ExactTask(prompt, row["answer"])

    async def ascore(self, task: ExactTask, answer: str) -> Reward:
        if answer.strip() == task.answer:
            return Reward(1.0)
        return Reward.zero(f"expected {task.answer!r}")


class BrokenVerifierEnv(ExactAnswerEnv):
    async def ascore(self, task: ExactTask, answer: str) -> Reward:
        raise RuntimeError("judge server unreachable")


class LookupToolEnv(ExactAnswerEnv):
    """Multi-turn: the model may call ``lookup``; the final answer must contain the task's answer."""

    max_turns = 3

    def prompt(self, task: ExactTask) -> list[dict[str, Any]]:
        tools = ({"type": "function", "name": "lookup", "parameters": {"type": "object"}},)
        system = {"role": "system", "content": "Use tools."}
        return super().prompt(replace(task, prompt=Prompt((system, *task.prompt.messages), tools)))

    async def aturn(self, episode: Episode, completion: Completion) -> Turn:
        parsed = self.parse_tool_calls(completion)
        if parsed.errors:
            return Turn([{"role": "tool", "content": "error: " + "; ".join(parsed.errors)}])
        if parsed.calls:
            return Turn([{"role": "tool", "content": episode.task.answer} for _ in parsed.calls])
        return Turn(done=True)

    async def ascore(self, task: ExactTask, answer: str) -> Reward:
        return Reward(float(task.answer in answer))


class LongestWinsEnv(ExactAnswerEnv):
    """Group-scored: within a group, the longest answer gets 1, the others 0."""

    scores_groups = True

    async def ascore_group(self, task, answers, episodes):
        lengths = [len(a) for a in answers]
        return [Reward(float(n == max(lengths)), {"length": n}) for n in lengths]


TOY_ENVS = {
    "toy/ExactAnswer-v0": ExactAnswerEnv,
    "toy/BrokenVerifier-v0": BrokenVerifierEnv,
    "toy/LookupTool-v0": LookupToolEnv,
    "toy/LongestWins-v0": LongestWinsEnv,
}


def register_toy_envs() -> None:
    from cascade_envs import register

    for env_id, cls in TOY_ENVS.items():
        register(env_id, cls)


class CharTemplatePolicy(ScriptedPolicy):
    """A ``ScriptedPolicy`` with token ids: a character-level "tokenizer" and a chat template whose
    rendered history is a prefix of the next prompt (token ids are character codes of
    ``<role>content</>`` blocks), for tests of trajectories and token budgets.

    ``reply(messages) -> str`` gives each turn's text; ``finish(messages)`` its finish reason.
    ``context`` makes a prompt longer than that many tokens raise ``ContextOverflowError``.
    """

    END = "</>"

    def __init__(
        self, reply, *, finish=lambda messages: "stop", context: int | None = None, delay_s: float = 0.0
    ):
        super().__init__(reply, delay_s=delay_s)
        self.finish, self.context = finish, context

    @classmethod
    def render(cls, messages, generation_prompt: bool = True) -> str:
        text = "".join(f"<{m['role']}>{m['content']}{cls.END}" for m in messages)
        return text + ("<assistant>" if generation_prompt else "")

    async def agenerate(self, messages, *, sampling, thinking=True):
        prompt = [ord(c) for c in self.render(messages)]
        if self.context is not None and len(prompt) > self.context:
            raise ContextOverflowError(f"{len(prompt)} tokens > {self.context}")
        text = str(await super().agenerate(messages, sampling=sampling, thinking=thinking))
        ids = [ord(c) for c in text + self.END]
        return Completion(text, self.finish(messages), ids, [-0.5] * len(ids), prompt)
