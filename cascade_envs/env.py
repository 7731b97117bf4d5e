"""The environment base class: a ``gymnasium.Env`` over chat messages with async methods and rewards.

A subclass says how to validate a task row (``load_task``) and how to score a final answer
(``ascore``). Multi-turn envs also override ``aturn`` to answer tool calls. Everything else —
task sampling, the reasoning split, the overlong rule, turn limits, turning verifier exceptions
into masked rewards — lives here, once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import gymnasium
from gymnasium.utils import seeding

from .core import ChatSpace, Completion, Message, Reward, Task, TaskError, TextSpace, as_completion
from .data import TaskSource, load_tasks, prompt_messages, task_id
from .reasoning import overlong_reason, split_reasoning
from .tools import tool_parsers, with_tools

T = TypeVar("T")


@dataclass
class Turn:
    """What the env answers to one model turn."""

    observation: list[Message] = field(default_factory=list)
    reward: Reward | None = None
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class Env(gymnasium.Env[list, str]):
    """Base class of every cascade environment.

    Observations are the *new* chat messages of each turn; the action is the model's raw text
    (a ``str`` or a ``Completion``). ``step`` returns the reward as a float and the full ``Reward``
    in ``info["reward"]``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    default_tasks: ClassVar[str | None] = None
    """Task file used when none is given, e.g. ``"bundled:mcqa/samples.jsonl"``."""
    max_turns: int = 1
    thinking: bool = True
    scores_groups: ClassVar[bool] = False
    """True when ``ascore_group`` is more than per-sample scoring (the runner then calls it)."""
    tool_parser: str = "xml_json"

    def __init__(
        self,
        tasks: str | Iterable[Any] | TaskSource | None = None,
        *,
        thinking: bool | None = None,
        max_turns: int | None = None,
        system_prompt: str | None = None,
        on_bad_rows: str = "raise",
    ):
        self.observation_space = ChatSpace()
        self.action_space = TextSpace()
        if thinking is not None:
            self.thinking = bool(thinking)
        if max_turns is not None:
            if max_turns < 1:
                raise ValueError("max_turns must be at least 1")
            self.max_turns = int(max_turns)
        self.system_prompt = system_prompt
        source = tasks if tasks is not None else self.default_tasks
        self.tasks: TaskSource | None = (
            None if source is None else load_tasks(source, self.load_task, type(self), on_bad_rows)
        )
        self.task: Task | None = None
        self.task_id = ""
        self.messages: list[Message] = []
        self.turn = 0
        self.done = True

    # ----- what subclasses define -------------------------------------------------------------

    def load_task(self, row: dict[str, Any]) -> Task:
        """Validate and normalise a task row; raise ``TaskError`` naming the bad field.

        Must depend only on the row (results are cached per file). The default checks that the
        row has a prompt.
        """
        prompt_messages(row)
        return row

    def prompt(self, task: Task) -> list[Message]:
        """The opening messages of an episode (tools, if the task has any, go in the system prompt)."""
        messages = prompt_messages(task)
        if self.system_prompt and not (messages and messages[0]["role"] == "system"):
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        params = task.get("responses_create_params")
        tools = task.get("tools") or (params.get("tools") if isinstance(params, dict) else None)
        return with_tools(messages, tools or [])

    async def ascore(self, task: Task, answer: str) -> Reward:
        """Score the final ``answer`` (reasoning already split off). Single-turn envs define this."""
        raise NotImplementedError(f"{type(self).__name__} must implement ascore() or aturn()")

    async def aturn(self, completion: Completion) -> Turn:
        """React to one model turn. The default ends the episode and scores the answer."""
        assert self.task is not None
        return Turn(reward=await self.areward(self.task, completion), done=True)

    async def atruncate(self) -> Reward:
        """The reward when the turn limit ends an episode before the model finished."""
        return Reward.zero(f"turn limit of {self.max_turns} reached without a final answer")

    # ----- scoring ----------------------------------------------------------------------------

    async def areward(self, task: Task, completion: str | Completion) -> Reward:
        """Score one response: the overlong rule, the reasoning split, then ``ascore``.

        A verifier that raises gives a masked reward carrying the error, never a silent 0.
        """
        completion = as_completion(completion)
        split = split_reasoning(completion)
        reason = overlong_reason(completion, split)
        if reason:
            return Reward.zero(reason, overlong=1.0)
        try:
            reward = await self.ascore(task, split.answer)
        except Exception as exc:
            return Reward.failed(f"{type(self).__name__} verifier raised {type(exc).__name__}: {exc}")
        if not isinstance(reward, Reward):
            return Reward.failed(f"{type(self).__name__}.ascore returned {type(reward).__name__}, not Reward")
        return reward

    async def ascore_group(self, task: Task, responses: list[str | Completion]) -> list[Reward]:
        """Score the G responses to one task together; the default scores each on its own."""
        task = self.load_task(task)
        return list(await asyncio.gather(*(self.areward(task, r) for r in responses)))

    def parse_tool_calls(self, text: str) -> Any:
        """Parse tool calls from ``text`` with this env's ``tool_parser``."""
        return tool_parsers.get(self.tool_parser)(text)

    # ----- gymnasium API, async first -----------------------------------------------------------

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seed)
        options = options or {}
        if "task" in options:
            task = self.load_task(options["task"])
        elif self.tasks is not None:
            task = self.tasks.sample(self.np_random)
        else:
            raise TaskError("no task: pass options={'task': row} or construct the env with tasks=")
        self.task, self.turn, self.done = task, 0, False
        self.task_id = task_id(task)
        self.messages = self.prompt(task)
        info = {"task_id": self.task_id, "thinking": self.thinking, "max_turns": self.max_turns}
        return list(self.messages), info

    async def astep(self, action: str | Completion) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self.done or self.task is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        completion = as_completion(action)
        self.turn += 1
        self.messages.append({"role": "assistant", "content": str(completion)})
        try:
            turn = await self.aturn(completion)
        except Exception as exc:
            turn = Turn(reward=Reward.failed(f"{type(self).__name__} raised {type(exc).__name__}: {exc}"), done=True)
        truncated = not turn.done and (self.turn >= self.max_turns or completion.truncated)
        reward = turn.reward
        if truncated and reward is None:
            reward = await self.atruncate()
        reward = reward or Reward(0.0)
        self.done = turn.done or truncated
        self.messages.extend(turn.observation)
        info = {**turn.info, "reward": reward, "turn": self.turn, "task_id": self.task_id}
        return list(turn.observation), reward.value, turn.done, truncated, info

    async def aclose(self) -> None:
        """Release resources (judge clients, sandboxes). The base env holds none."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[override]
        return run_sync(self.areset(seed=seed, options=options))

    def step(self, action: str | Completion):  # type: ignore[override]
        return run_sync(self.astep(action))

    def close(self) -> None:
        run_sync(self.aclose())


_local = threading.local()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code, on a loop kept per thread.

    Inside a running event loop (a notebook, an async app) it runs on a worker thread instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = getattr(_local, "loop", None)
        if loop is None or loop.is_closed():
            loop = _local.loop = asyncio.new_event_loop()
        return loop.run_until_complete(coro)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(_capture(run_sync, coro)))
    thread.start()
    thread.join()
    outcome, value = result[0]
    if outcome == "error":
        raise value
    return value


def _capture(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except BaseException as exc:
        return "error", exc
