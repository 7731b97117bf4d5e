"""The workplace env's bundled tables and tasks: they load, their solutions earn 1, near misses earn 0.

Each task row carries a ``solution``: the calls a good agent makes, reads included. A scripted
policy replays it through the ``RolloutRunner`` (one ``<tool_call>`` per turn, then a final text
answer that states the row's ``expected_answer`` when it asks a question). Perturbed solutions
(another row's id, another recipient, a write left out, a write too many) must score a legitimate
0, never 1 and never a masked reward; so must a question answered without its answer.
"""

from __future__ import annotations

import asyncio
import csv
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import cascade_envs
from cascade_envs import Reward
from cascade_envs.data import read_rows
from cascade_envs.envs.workplace.env import WorkplaceEnv
from cascade_envs.envs.workplace.toolset import WRITE_TOOLS
from cascade_envs.rollout import RolloutRunner
from cascade_envs.testing import ScriptedPolicy
from tests.envs.workplace.replies import final_reply

ENV_ID = "cascade/Workplace-v0"
ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "envs" / "workplace" / "data"
FINAL_ANSWER = "All done: I made the changes you asked for and checked the results."
ID_TABLES = {
    "email_id": "email",
    "event_id": "calendar",
    "task_id": "project_management",
    "customer_id": "customer_relationship_manager",
}
ADDRESS_ARGUMENTS = ("recipient", "participant_email", "assigned_to_email")

Call = dict[str, Any]


def calls(encoded: list[dict[str, str]]) -> list[Call]:
    """``solution``/``ground_truth`` entries with their JSON-string arguments decoded."""
    return [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in encoded]


def tool_call_text(call: Call) -> str:
    return f"<think>Next: {call['name']}.</think>\n<tool_call>{json.dumps(call)}</tool_call>"


def request(messages: list[dict[str, Any]]) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def scripted_policy(scripts: dict[str, list[Call]], finals: dict[str, str]) -> ScriptedPolicy:
    """Plays, for each request, its script: one tool call a turn, then its final answer."""

    def turn(messages: list[dict[str, Any]]) -> str:
        asked = request(messages)
        script = scripts[asked]
        step = sum(m["role"] == "assistant" for m in messages)
        return (
            tool_call_text(script[step]) if step < len(script) else f"<think>Finished.</think>{finals[asked]}"
        )

    return ScriptedPolicy(turn)


@pytest.fixture(scope="module")
def tasks(env: WorkplaceEnv) -> list[dict[str, Any]]:
    return [t.row for t in env.tasks or []]


def play(
    env: WorkplaceEnv,
    scripts: dict[str, list[Call]],
    tasks: list[dict[str, Any]],
    finals: dict[str, str] | None = None,
) -> dict[Any, Reward]:
    """Each task's reward when the scripted policy plays ``scripts[its request]``, then ``finals[its request]``
    (by default a reply that states the row's answer)."""
    finals = finals or {user_request(t): final_reply(t, FINAL_ANSWER) for t in tasks}

    async def run() -> dict[Any, Reward]:
        async with RolloutRunner(scripted_policy(scripts, finals), envs={ENV_ID: env}) as runner:
            groups = await runner.arun([(ENV_ID, task) for task in tasks])
        return {group.row["id"]: group.episodes[0].reward for group in groups}

    return asyncio.run(run())


def user_request(task: dict[str, Any]) -> str:
    return request(task["responses_create_params"]["input"])


# ----- loading and coverage -----------------------------------------------------------------------


def test_every_bundled_task_loads(tasks):
    rows = [row for _, row in read_rows(DATA / "tasks.jsonl")]
    assert len(tasks) == len(rows) and 40 <= len(rows) <= 60
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert "tools" not in row["responses_create_params"]  # the env announces its own
        assert row["category"].startswith("workplace_assistant_")
        gt_writes = [c for c in row["solution"] if c["name"] in WRITE_TOOLS]
        assert row["ground_truth"] == gt_writes, row["id"]  # ground truth = the solution's writes, in order


def test_every_tool_is_covered(env, tasks):
    in_solutions = {c["name"] for task in tasks for c in task["solution"]}
    in_ground_truth = {c["name"] for task in tasks for c in task["ground_truth"]}
    assert in_solutions == set(env.toolbox.names) and len(in_solutions) == 27
    assert in_ground_truth == set(WRITE_TOOLS)


def test_the_mix_of_tasks(tasks):
    read_only = [t for t in tasks if not t["ground_truth"]]
    multi_step = [t for t in tasks if len(t["solution"]) >= 3]
    batches = [t for t in tasks if len(t["ground_truth"]) >= 2]
    assert len(read_only) >= 5 and len(multi_step) >= 15 and len(batches) >= 10
    categories = {t["category"] for t in tasks}
    assert {
        f"workplace_assistant_{name}"
        for name in ("email", "calendar", "analytics", "project_management", "customer_relationship_manager")
    } <= categories


def test_the_env_runs_with_no_argument():
    env = cascade_envs.make(ENV_ID) if ENV_ID in cascade_envs.env_specs() else WorkplaceEnv()
    try:
        by_id = {str(task["id"]): task for task in (t.row for t in env.tasks or [])}
        assert len(by_id) == len(list(read_rows(DATA / "tasks.jsonl")))  # the bundled tasks by default
        messages, info = env.reset(seed=3)
        assert "<tools>" in messages[0]["content"] and "2025-11-13" in messages[0]["content"]
        _, reward, terminated, _, step_info = env.step(FINAL_ANSWER)  # a reply, and no call
        assert terminated and not step_info["reward"].masked
        row = by_id[info["task_id"]]
        assert reward == (0.0 if row["ground_truth"] or "expected_answer" in row else 1.0)
    finally:
        env.close()


def test_the_bundled_data_is_what_its_generator_makes(monkeypatch):
    """The rows (answers included) and the tables are rebuilt exactly by ``bench/data/make_workplace_tasks.py``."""
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "data"))
    generator = importlib.import_module("make_workplace_tasks")
    try:
        tables = generator.build()
        assert generator.task_lines(tables) == (DATA / "tasks.jsonl").read_text(encoding="utf-8")
        for name, rows in tables.items():
            with (DATA / "tables" / name).open(newline="", encoding="utf-8") as fh:
                assert list(csv.DictReader(fh)) == rows, name
    finally:
        for module in ("make_workplace_tasks", "make_workplace_tables"):
            sys.modules.pop(module, None)


def test_every_question_carries_its_answer(tasks):
    """A request that asks something names its answer; only the two refusals (nobody by that name, a
    meeting past 6pm), which change nothing, are scored on the state alone."""
    for task in tasks:
        assert ("?" in user_request(task)) == ("expected_answer" in task), task["id"]
    unchecked = [t["id"] for t in tasks if not t["ground_truth"] and "expected_answer" not in t]
    assert len(unchecked) == 2
    assert sum("expected_answer" in t for t in tasks) >= 9


# ----- the solutions ------------------------------------------------------------------------------


def test_every_solution_earns_1(env, tasks):
    rewards = play(env, {user_request(t): calls(t["solution"]) for t in tasks}, tasks)
    wrong = {key: (r.value, r.reason, r.error) for key, r in rewards.items() if r.value != 1.0 or r.masked}
    assert not wrong
    assert len(rewards) == len(tasks)


def test_every_write_uses_what_the_agent_could_see(env, tasks):
    """Ids and addresses in a write come from the request or an earlier tool result: no hidden knowledge."""

    async def check(task: dict[str, Any]) -> list[str]:
        episode = await env.astart(env.load(task))
        seen, unseen = user_request(task), []
        try:
            for call in calls(task["solution"]):
                if call["name"] in WRITE_TOOLS:
                    for name, value in call["arguments"].items():
                        if (
                            name in ID_TABLES or name in ADDRESS_ARGUMENTS or "@" in str(value)
                        ) and value not in seen:
                            unseen.append(f"{call['name']} {name}={value}")
                turn = await env.aadvance(episode, tool_call_text(call))
                result = turn.observation[0]["content"]
                assert not result.startswith("Error"), (task["id"], call, result)
                seen += result
        finally:
            await env.aend(episode)
        return unseen

    problems = {t["id"]: unseen for t in tasks if (unseen := asyncio.run(check(t)))}
    assert not problems


def test_a_question_answered_without_its_answer_scores_0(env, tasks):
    """The solution's reads, or none, then a reply that does not state the answer: 0, never 1."""
    questions = [t for t in tasks if "expected_answer" in t]
    vague = {user_request(t): FINAL_ANSWER for t in questions}
    read = play(env, {user_request(t): calls(t["solution"]) for t in questions}, questions, vague)
    idle = play(env, {user_request(t): [] for t in questions}, questions, vague)
    for task in questions:
        for reward in (read[task["id"]], idle[task["id"]]):
            assert reward.value == 0.0 and not reward.masked, (task["id"], reward)
            assert "does not state the expected answer" in reward.reason, (task["id"], reward.reason)


# ----- near misses score 0 ------------------------------------------------------------------------


def perturbations(env: WorkplaceEnv, task: dict[str, Any]) -> dict[str, list[Call]]:
    """The solution with one mistake each: another row's id, another recipient, a write missing, one extra."""
    solution = calls(task["solution"])
    used = json.dumps(solution)
    writes = [i for i, c in enumerate(solution) if c["name"] in WRITE_TOOLS]
    variants: dict[str, list[Call]] = {}
    spare_email = next(k for k in sorted(row["email_id"] for row in env.workplace["email"]) if k not in used)
    variants["extra write"] = [
        *solution,
        {"name": "email_delete_email", "arguments": {"email_id": spare_email}},
    ]
    if not writes:
        return variants
    variants["missing write"] = [c for i, c in enumerate(solution) if i != writes[-1]]
    for i in writes:
        arguments = solution[i]["arguments"]
        id_name = next((name for name in arguments if name in ID_TABLES), None)
        if id_name and "wrong id" not in variants:
            table = env.workplace[ID_TABLES[id_name]]
            other = next(k for k in sorted(row[id_name] for row in table) if k not in used)
            variants["wrong id"] = replaced(solution, i, id_name, other)
        address = next((name for name in arguments if name in ADDRESS_ARGUMENTS), None)
        if address is None and arguments.get("field") == "assigned_to_email":
            address = "new_value"
        if address and "wrong recipient" not in variants:
            assignees = sorted({row["assigned_to_email"] for row in env.workplace["project_management"]})
            other = next(a for a in [*assignees, *env.workplace.directory] if a not in used)
            variants["wrong recipient"] = replaced(solution, i, address, other)
    return variants


def replaced(solution: list[Call], index: int, argument: str, value: str) -> list[Call]:
    changed = {**solution[index], "arguments": {**solution[index]["arguments"], argument: value}}
    return [changed if i == index else c for i, c in enumerate(solution)]


@pytest.mark.parametrize("kind", ["wrong id", "wrong recipient", "missing write", "extra write"])
def test_a_near_miss_scores_0(env, tasks, kind):
    chosen = [(t, variant) for t in tasks if (variant := perturbations(env, t).get(kind)) is not None]
    assert len(chosen) >= 10
    rewards = play(env, {user_request(t): variant for t, variant in chosen}, [t for t, _ in chosen])
    for task, _ in chosen:
        reward = rewards[task["id"]]
        assert reward.value == 0.0 and not reward.masked, (kind, task["id"], reward)
        assert "differs from the expected one" in reward.reason, (kind, task["id"], reward.reason)
