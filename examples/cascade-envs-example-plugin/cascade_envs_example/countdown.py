"""The Countdown numbers game as a cascade-envs environment.

Reach ``target`` by combining ``nums`` with + - * / (each number at most once) and give the
expression inside ``<answer></answer>``. Rows use the field names of the public Countdown RL
data (``nums``, ``target``; a ``prompt`` is written when the row has none), so the env can be
pointed at those files as well as at the bundled sample set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cascade_envs import Env, Prompt, Reward, Row, TaskError

from .arithmetic import ExpressionError, evaluate

ANSWER_TAG_RE = re.compile(r"<(/?)answer>", re.IGNORECASE)
TRAILING_RESULT_RE = re.compile(r"=\s*(-?\d+)\s*$")
BUNDLED_TASKS = str(Path(__file__).with_name("data") / "countdown.jsonl")
MAX_NUMBERS = 8

PROMPT = (
    "Using the numbers {nums}, create an equation that equals {target}. You can use the basic "
    "arithmetic operations (+, -, *, /) and parentheses, and each number at most once. Show your "
    "work, then give only the expression in <answer></answer> tags, for example "
    "<answer>(1 + 2) / 3</answer>."
)


@dataclass(frozen=True)
class CountdownTask:
    """A Countdown row, checked once when the env loads it; ``prompt`` is what the model sees."""

    prompt: Prompt
    nums: tuple[int, ...]
    target: int


def read_task(row: Row, template: str = PROMPT, tools: tuple[dict, ...] = ()) -> CountdownTask:
    """Check a row; ``TaskError`` names the field that is wrong. A row without a ``prompt`` gets
    ``template``'s; ``tools``: the tool specs the prompt announces."""
    nums = row.get("nums")
    if not isinstance(nums, list) or not 2 <= len(nums) <= MAX_NUMBERS:
        raise TaskError(f"expected a list of 2 to {MAX_NUMBERS} integers", "nums")
    if not all(type(n) is int and n > 0 for n in nums):
        raise TaskError("every number must be a positive integer", "nums")
    target = row.get("target")
    if type(target) is not int:
        raise TaskError("expected an integer", "target")
    prompt = Prompt.of({**row, "prompt": row.get("prompt") or template.format(nums=nums, target=target)})
    return CountdownTask(Prompt(prompt.messages, tools), tuple(nums), target)


class CountdownEnv(Env[CountdownTask]):
    """Single-turn Countdown: reward 1 for an expression that reaches the target exactly, else 0."""

    default_tasks = BUNDLED_TASKS

    def load_task(self, row: Row) -> CountdownTask:
        return read_task(row)

    async def ascore(self, task: CountdownTask, answer: str) -> Reward:
        expression = last_answer(answer)
        if expression is None:
            return Reward.zero("no <answer></answer> block")
        expression = expression.strip()
        claimed = TRAILING_RESULT_RE.search(expression)
        if claimed:  # "(1 + 2) * 8 = 24": the claim must be right, the expression is what counts
            if int(claimed.group(1)) != task.target:
                return Reward.zero(f"the answer claims {claimed.group(1)}, the target is {task.target}")
            expression = expression[: claimed.start()]
        try:
            value = evaluate(expression, task.nums)
        except ExpressionError as exc:
            return Reward.zero(f"invalid expression: {exc}")
        if value != task.target:
            return Reward.zero(f"the expression equals {value}, not {task.target}", result=str(value))
        return Reward(1.0, {"result": str(value)})


def last_answer(text: str) -> str | None:
    """The text of the last complete ``<answer>...</answer>`` block, found in one linear scan."""
    start = found = None
    for tag in ANSWER_TAG_RE.finditer(text):
        if not tag.group(1):
            start = tag.end()
        elif start is not None:
            found, start = text[start : tag.start()], None
    return found
