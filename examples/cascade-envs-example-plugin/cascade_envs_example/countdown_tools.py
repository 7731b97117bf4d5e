"""Countdown played with a tool, over several turns: the multi-turn example (README: "Multi-turn").

Each episode has a board (``on_reset``): the task's numbers. The model calls ``combine(a, op, b)``,
which takes two numbers off the board and puts their result back (whole, positive results only, as
in the game), and ``numbers()`` to look. The kernel's tool turn (``Toolbox.aturn``) runs the calls
of each reply; a reply without a call is the final answer and ends the episode. Reward 1 when the
target is on the board and the final reply gives it in ``<answer></answer>``; every other end
scores a plain 0, and a board released before scoring (the env's fault) masks the sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from cascade_envs import Env, Reward, Row
from cascade_envs.core import Completion
from cascade_envs.episode import Episode, Turn
from cascade_envs.tools import Toolbox, ToolError, tool

from .countdown import BUNDLED_TASKS, CountdownTask, last_answer, read_task

MAX_CALLS_PER_TURN = 8
PROMPT = (
    "Reach {target} from the numbers {nums}. Each combine call takes two of your numbers and puts "
    "their sum, difference, product or quotient back (whole, positive results only). When {target} is "
    "one of your numbers, reply without a tool call and give it as <answer>{target}</answer>."
)


@dataclass
class Board:
    """One episode's numbers: the task's, then each result in place of its two operands."""

    numbers: list[int]


@tool(hidden=["board"])
def combine(a: int, op: Literal["+", "-", "*", "/"], b: int, *, board: Board) -> str:
    """Replace two of your numbers by their result.

    Args:
        a: one of your numbers.
        op: the operation.
        b: another of your numbers.
    """
    left = list(board.numbers)
    for n in (a, b):
        if n not in left:
            raise ToolError(f"{n} is not one of your numbers {board.numbers}")
        left.remove(n)
    result = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if a % b == 0 else 0}[op]
    if result <= 0:
        raise ToolError(f"{a} {op} {b} is not a whole, positive number")
    board.numbers = [*left, result]
    return f"{a} {op} {b} = {result}; your numbers: {board.numbers}"


@tool(hidden=["board"])
def numbers(*, board: Board) -> list[int]:
    """The numbers you have now."""
    return board.numbers


class CountdownToolsEnv(Env[CountdownTask]):
    """Multi-turn Countdown with a ``combine`` tool; scored on the board and the final reply."""

    default_tasks = BUNDLED_TASKS
    max_turns = 6

    def __init__(self, tasks: Any = None, *, max_calls_per_turn: int = MAX_CALLS_PER_TURN, **kwargs: Any):
        self.toolbox = Toolbox([combine, numbers])  # set before Env.__init__: load_task reads it
        self.max_calls_per_turn = max_calls_per_turn
        super().__init__(tasks, **kwargs)

    def load_task(self, row: Row) -> CountdownTask:
        return read_task(row, PROMPT, tuple(self.toolbox.specs()))

    async def on_reset(self, episode: Episode[CountdownTask]) -> None:
        episode.state = Board(list(episode.task.nums))

    async def on_end(self, episode: Episode[CountdownTask]) -> None:
        episode.state = None

    async def aturn(self, episode: Episode[CountdownTask], completion: Completion) -> Turn:
        tools = await self.toolbox.aturn(
            completion, {"board": episode.state}, max_calls=self.max_calls_per_turn, parser=self.tool_parser
        )
        return Turn(tools.messages, done=tools.ended, info=tools.info)

    async def ascore_episode(self, episode: Episode[CountdownTask], answer: str) -> Reward:
        board: Board | None = episode.state
        if board is None:  # the env's mistake, not the model's: masked, never a 0
            return Reward.failed("the board was released before the episode was scored")
        target, stated = episode.task.target, last_answer(answer)
        if stated is None or stated.strip() != str(target):
            return Reward.zero(
                f"the final reply does not give <answer>{target}</answer>", numbers=board.numbers
            )
        if target not in board.numbers:
            return Reward.zero(f"{target} is not one of the numbers {board.numbers}", numbers=board.numbers)
        return Reward(1.0, {"numbers": board.numbers})

    async def atruncation_reward(self, episode: Episode[CountdownTask], reason: str) -> Reward:
        return Reward.zero(f"truncated: {reason}; the task ends with a final reply, and none came")
