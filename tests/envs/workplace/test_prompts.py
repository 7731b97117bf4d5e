"""Start-of-episode work done once: each row read when its env loads it, each tools section rendered once.

The cached prompts must be exactly what the kernel's ``Env.prompt`` and ``with_tools`` give, and
be handed out fresh.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from cascade_envs import Env, Prompt
from cascade_envs.data import prompt_messages
from cascade_envs.envs.workplace import env as env_module
from cascade_envs.envs.workplace import task as task_module
from cascade_envs.envs.workplace.env import WorkplaceEnv, bundled_tables
from cascade_envs.tools import with_tools

TABLES = bundled_tables()


@pytest.fixture(scope="module")
def rows(env: WorkplaceEnv) -> list[dict[str, Any]]:
    return [loaded.row for loaded in env.tasks or []]


def counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Wrap ``module.name`` so that each call is counted; returns the counter (a one-item list)."""
    calls = [0]
    real: Callable[..., Any] = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def start_and_end(env: WorkplaceEnv, row: dict[str, Any]) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        episode = await env.astart(env.load(row))
        await env.aend(episode)
        return episode.messages

    return asyncio.run(run())


def with_own_specs(env: WorkplaceEnv, row: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """``row`` announcing some of our tools itself, in the Responses-API form of NeMo Gym's rows."""
    specs = [
        {"type": "function", **spec["function"]}
        for spec in env.toolbox.specs()
        if spec["function"]["name"] in names
    ]
    return {**row, "responses_create_params": {**row["responses_create_params"], "tools": specs}}


# ----- prompts ------------------------------------------------------------------------------------


def prompt(env: WorkplaceEnv, row: dict[str, Any]) -> list[dict[str, Any]]:
    return env.prompt(env.load_task(row))


def test_the_prompt_is_what_the_uncached_path_gives(env, rows):
    row = rows[0]
    assert prompt(env, row) == with_tools(prompt_messages(row), env.toolbox.specs())
    names = sorted({c["name"] for c in row["solution"]})
    own = with_own_specs(env, row, names)
    assert prompt(env, own) == Env.prompt(
        env, Prompt.of(own)
    )  # the row's own specs, as the kernel renders them
    assert prompt(env, own) != prompt(env, row) and all(
        name in prompt(env, own)[0]["content"] for name in names
    )


def test_the_system_prompt_option_comes_first_as_in_the_kernel(rows):
    user_only = {
        **rows[0],
        "responses_create_params": {
            "input": [
                {
                    "role": "user",
                    "content": f"{rows[0]['responses_create_params']['input'][0]['content']} "
                    f"{rows[0]['responses_create_params']['input'][1]['content']}",
                }
            ]
        },
    }
    made = WorkplaceEnv([user_only], tables=TABLES, system_prompt="You are Morgan's assistant.")
    try:
        messages = prompt(made, user_only)
        assert messages == with_tools(Env.prompt(made, Prompt.of(user_only)), made.toolbox.specs())
        assert messages[0]["content"].startswith("You are Morgan's assistant.\n\n# Tools")
    finally:
        made.close()


def test_each_tools_section_is_rendered_once_and_handed_out_fresh(env, rows, monkeypatch):
    renders = counting(monkeypatch, task_module, "with_tools")
    fresh = WorkplaceEnv(rows[:5], tables=TABLES)
    try:
        prompts = [start_and_end(fresh, row)[:2] for row in rows[:5] for _ in range(3)]
        assert renders[0] == 1  # five rows, fifteen episodes, one system prompt: one rendering
        prompts[0][0]["content"] = "changed by a caller"
        assert (
            start_and_end(fresh, rows[0])[0]["content"] == prompts[1][0]["content"] != "changed by a caller"
        )
        own = with_own_specs(fresh, rows[0], [c["name"] for c in rows[0]["solution"]])
        start_and_end(fresh, own)
        start_and_end(fresh, {**own})  # another row object, the same spec list
        assert renders[0] == 2
    finally:
        fresh.close()


# ----- rows ---------------------------------------------------------------------------------------


def test_a_row_is_read_once_when_it_loads_never_per_episode(env, rows, monkeypatch):
    reads = counting(monkeypatch, env_module, "read_task")
    row = {**next(r for r in rows if "expected_answer" in r), "expected_answer": "a different answer"}
    loaded = env.load(row)
    assert reads[0] == 1
    solution = [
        f"<tool_call>{json.dumps({'name': c['name'], 'arguments': json.loads(c['arguments'])})}</tool_call>"
        for c in row["solution"]
    ]

    async def answered(reply: str) -> float:
        episode = await env.astart(loaded)
        for text in [*solution, reply]:
            await env.aadvance(episode, text)
        (reward,) = await env.ascore_episodes([episode])
        await env.aend(episode)
        return reward.value

    assert asyncio.run(answered("It is a different answer.")) == 1.0
    assert asyncio.run(answered("I do not know.")) == 0.0
    assert reads[0] == 1  # two episodes (start, prompt, workplace, scoring): no read
