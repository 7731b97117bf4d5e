"""Bad input to the workplace env, on its bundled tables: every case gets a readable answer in bounded time.

Each case ends in one of two ways: a tool message the policy can read (``Error: ...``) after which
the episode goes on and can still be solved, or a reward with its reason (a legitimate 0, or a
masked failure naming its cause). Every case asserts a wall-clock bound, generous for two busy
cores and far below what an unbounded path would take.
"""

from __future__ import annotations

import asyncio
import csv
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cascade_envs import Completion, DataError, Reward
from cascade_envs.envs.workplace.common import MAX_PAGE_SIZE, MAX_TEXT_CHARS
from cascade_envs.envs.workplace.env import MAX_CALLS_PER_TURN, WorkplaceEnv, bundled_tables
from cascade_envs.envs.workplace.tables import MAX_NEW_ROWS
from cascade_envs.episode import Episode
from cascade_envs.rollout import RolloutRunner
from cascade_envs.testing import ScriptedPolicy
from cascade_envs.tools import ToolCall
from tests.envs.workplace.replies import final_reply

ENV_ID = "cascade/Workplace-v0"
TABLES = bundled_tables()
TASKS = TABLES.parent / "tasks.jsonl"
ANSWER = "Done."
SEND = "email_send_email"


@contextmanager
def within(seconds: float) -> Iterator[None]:
    start = time.perf_counter()
    yield
    elapsed = time.perf_counter() - start
    assert elapsed < seconds, f"took {elapsed:.2f} s, over the bound of {seconds} s"


def call_text(tool: str, /, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>"


def solution_texts(task: dict[str, Any]) -> list[str]:
    return [call_text(c["name"], **json.loads(c["arguments"])) for c in task["solution"]]


@pytest.fixture(scope="module")
def tasks(env: WorkplaceEnv) -> dict[str, dict[str, Any]]:
    """Bundled tasks by request text, and three picked by what they do."""
    rows = [t.row for t in env.tasks or []]
    by_shape = {
        "send": next(
            t
            for t in rows
            if [c["name"] for c in t["solution"]] == ["company_directory_find_email_address", SEND]
        ),
        "read only": next(t for t in rows if not t["ground_truth"] and len(t["solution"]) == 1),
        "delete": next(t for t in rows if [c["name"] for c in t["ground_truth"]] == ["email_delete_email"]),
    }
    return by_shape


async def play(
    env: WorkplaceEnv, task: dict[str, Any], texts: list[str | Completion]
) -> tuple[Episode, Reward, list]:
    """Play ``texts`` as the model's turns (stopping when the episode ends); its reward and tool messages."""
    episode = await env.astart(env.load(task))
    observations: list = []
    try:
        for text in texts:
            if episode.done:
                break
            turn = await env.aadvance(episode, text)
            observations.extend(turn.observation)
        (reward,) = await env.ascore_episodes([episode])
    finally:
        await env.aend(episode)
    return episode, reward, observations


def first_tool_message(observations: list) -> str:
    return next(m["content"] for m in observations if m["role"] == "tool")


# ----- malformed calls: an error message, then the episode goes on and can still earn 1 ------------

MALFORMED = {
    "broken JSON": (
        '<tool_call>{"name": "email_send_email", "arguments": {"recipient": </tool_call>',
        "invalid JSON",
    ),
    "not an object": ("<tool_call>[1, 2, 3]</tool_call>", "expected an object with a string 'name'"),
    "arguments not an object": (
        '<tool_call>{"name": "email_send_email", "arguments": [1]}</tool_call>',
        "'arguments' must be an object",
    ),
    "unknown tool": (call_text("email_sendd_email", recipient="a@b.io"), "did you mean 'email_send_email'"),
    "wrong types": (
        call_text(SEND, recipient=["x@y.io"], subject=7, body=None),
        "invalid arguments for email_send_email",
    ),
    "page is text": (call_text("email_search_emails", query="budget", page="two"), "invalid arguments"),
    "page size below 1": (
        call_text("email_search_emails", query="budget", page_size=-3),
        "page_size must be at least 1",
    ),
    "unknown argument": (call_text(SEND, recipient="a@b.io", subject="s", body="b", cc="c@d.io"), "cc"),
    "bad date": (
        call_text(
            "calendar_create_event",
            event_name="x",
            participant_email="a@b.io",
            event_start="next tuesday",
            duration="30",
        ),
        "Invalid event_start format",
    ),
    "missing id": (call_text("email_delete_email", email_id="99999999"), "Email not found."),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_call_gets_an_error_message_and_the_episode_goes_on(env, tasks, case):
    text, expected = MALFORMED[case]
    task = tasks["send"]
    with within(2.0):
        episode, reward, observations = asyncio.run(play(env, task, [text, *solution_texts(task), ANSWER]))
    message = first_tool_message(observations)
    assert message.startswith("Error: ") and expected in message, message
    assert episode.terminated and reward.value == 1.0 and not reward.masked, reward


def test_the_whole_run_goes_on_through_bad_turns(env, tasks):
    """Through the RolloutRunner: every episode gets its reward, none an error."""
    bad = [text for text, _ in MALFORMED.values()]

    finals = {
        task["responses_create_params"]["input"][-1]["content"]: final_reply(task, ANSWER)
        for task in tasks.values()
    }

    def turn(messages):
        """Two malformed calls a turn for five turns (all ten cases), then an answer (a question's, stated)."""
        step = sum(m["role"] == "assistant" for m in messages)
        if step == 5:
            return finals[next(m["content"] for m in messages if m["role"] == "user")]
        return bad[2 * step] + bad[2 * step + 1]

    async def run():
        async with RolloutRunner(ScriptedPolicy(turn), envs={ENV_ID: env}, group_size=4) as runner:
            return await runner.arun([(ENV_ID, task) for task in tasks.values()])

    with within(5.0):
        groups = asyncio.run(run())
    episodes = [e for g in groups for e in g.episodes]
    assert len(episodes) == 12 and all(e.error is None and not e.reward.masked for e in episodes)
    for group in groups:  # nothing was written: a question is answered, a task that writes is not done
        assert group.rewards == [0.0 if group.row["ground_truth"] else 1.0] * 4


# ----- size: huge arguments, huge replies, calls over thousands of rows ----------------------------


def test_a_10_mb_email_body_is_refused_and_the_episode_goes_on(env, tasks):
    task = tasks["send"]
    recipient = json.loads(task["ground_truth"][0]["arguments"])["recipient"]
    huge = call_text(SEND, recipient=recipient, subject="Beta feedback summary", body="x" * (10 * 2**20))
    with within(5.0):
        episode, reward, observations = asyncio.run(play(env, task, [huge, *solution_texts(task), ANSWER]))
    message = first_tool_message(observations)
    assert (
        message.startswith("Error: argument 'body' has 10,485,760 characters")
        and f"{MAX_TEXT_CHARS:,}" in message
    )
    assert reward.value == 1.0 and episode.state is None  # nothing was stored; released after scoring


def test_a_10_mb_final_answer_is_scored(env, tasks):
    task = tasks["delete"]
    with within(5.0):
        _, reward, _ = asyncio.run(play(env, task, [*solution_texts(task), "y" * (10 * 2**20)]))
    assert reward.value == 1.0 and not reward.masked


@pytest.fixture(scope="module")
def big_tables(tmp_path_factory) -> Path:
    """The bundled tables plus 5,000 emails and 3,000 project tasks."""
    folder = tmp_path_factory.mktemp("big") / "tables"
    shutil.copytree(TABLES, folder)
    with (folder / "emails.csv").open("a", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(
            [
                f"{90_000 + i:08d}",
                "inbox",
                "digest@parcelgrid.com",
                f"Parcelgrid alert {i}",
                "2025-11-01 07:00:00",
                "Tracking update for your shipment.",
            ]
            for i in range(5000)
        )
    with (folder / "project_tasks.csv").open("a", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(
            [
                f"{90_000 + i:08d}",
                f"Triage ticket {i}",
                "kenji.morimoto@fernbrook.io",
                "Backlog",
                "2025-12-01",
                "Back end",
            ]
            for i in range(3000)
        )
    return folder


def test_calls_over_thousands_of_rows_are_bounded(big_tables, tasks):
    env = WorkplaceEnv(tables=big_tables)
    task = tasks["delete"]
    turns = [
        call_text("email_search_emails", query="parcelgrid", page_size=100_000),
        call_text("project_management_search_tasks", board="Back end"),
        *solution_texts(task),
        ANSWER,
    ]
    try:
        with within(5.0):
            _, reward, observations = asyncio.run(play(env, task, turns))
    finally:
        env.close()
    page = json.loads(observations[0]["content"])
    assert len(page["emails"]) == MAX_PAGE_SIZE and page["pagination"]["total_emails"] >= 5000
    listing = observations[1]["content"]
    assert len(listing) < 21_000 and listing.endswith("more characters cut]")
    assert reward.value == 1.0  # the state comparison on the big tables is right, and quick


def test_a_table_stops_growing_with_a_readable_error(env):
    db = env.workplace.fresh()
    call = ToolCall(SEND, {"recipient": "grace.owusu@fernbrook.io", "subject": "Spam", "body": "again"})

    async def send_all() -> list:
        return [await env.toolbox.acall(call, {"db": db}) for _ in range(MAX_NEW_ROWS + 1)]

    with within(10.0):
        results = asyncio.run(send_all())
    assert all(r.ok for r in results[:MAX_NEW_ROWS])
    assert not results[-1].ok and "table is full" in results[-1].content
    assert len(db["email"]) == len(env.workplace["email"]) + MAX_NEW_ROWS


# ----- repetition and the turn limit --------------------------------------------------------------


def test_the_same_call_500_times_in_one_turn(env, tasks):
    task = tasks["send"]
    send = solution_texts(task)[-1]
    with within(5.0):
        _, reward, observations = asyncio.run(play(env, task, [send * 500, ANSWER]))
    assert len(observations) == MAX_CALLS_PER_TURN + 1
    assert f"{500 - MAX_CALLS_PER_TURN} more were not run" in observations[-1]["content"]
    assert reward.value == 0.0 and not reward.masked and "unexpected new row (31 times)" in reward.reason


def test_the_same_call_500_times_across_turns(tasks):
    env = WorkplaceEnv(tables=TABLES, max_turns=501)
    task = tasks["read only"]
    read = solution_texts(task)[0]
    try:
        with within(10.0):
            episode, reward, observations = asyncio.run(
                play(env, task, [read] * 500 + [final_reply(task, ANSWER)])
            )
            _, repeated_write, _ = asyncio.run(
                play(env, task, [call_text(SEND, recipient="a@b.io", subject="s", body="b")] * 500 + [ANSWER])
            )
    finally:
        env.close()
    assert episode.turns == 501 and len(observations) == 500 and reward.value == 1.0  # reads change nothing
    assert (
        repeated_write.value == 0.0 and not repeated_write.masked and "(500 times)" in repeated_write.reason
    )


def test_an_episode_at_its_turn_limit(env, tasks):
    write_task, read_task = tasks["send"], tasks["read only"]
    stall = call_text("company_directory_find_email_address", name="grace")
    with within(3.0):
        solved, solved_reward, _ = asyncio.run(
            play(env, write_task, [*solution_texts(write_task)] + [stall] * 10)
        )
        idle, idle_reward, _ = asyncio.run(play(env, write_task, [stall] * 10))
        asked, asked_reward, _ = asyncio.run(play(env, read_task, [stall] * 10))
        cut, cut_reward, _ = asyncio.run(
            play(env, write_task, [Completion(solution_texts(write_task)[0], "length")])
        )
    assert all(e.truncated and e.turns == n for e, n in ((solved, 6), (idle, 6), (asked, 6), (cut, 1)))
    # the state decides for a task that writes (NeMo Gym's rule at max_steps); a question needs its answer
    assert solved_reward.value == 1.0 and "truncated: turn limit of 6" in solved_reward.reason
    assert idle_reward.value == 0.0 and "a new row is missing" in idle_reward.reason
    assert asked_reward.value == 0.0 and "none came" in asked_reward.reason
    assert cut_reward.value == 0.0 and "maximum length" in cut_reward.reason
    assert not any(r.masked for r in (solved_reward, idle_reward, asked_reward, cut_reward))


# ----- rows and state -----------------------------------------------------------------------------


def test_a_row_whose_ground_truth_fails_on_its_tables_is_rejected_at_load(tasks, tmp_path):
    good = tasks["delete"]
    bad = {
        **good,
        "id": "ghost-delete",
        "ground_truth": [{"name": "email_delete_email", "arguments": json.dumps({"email_id": "99999999"})}],
    }
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in (good, bad)) + "\n")
    with within(3.0):
        with pytest.raises(DataError) as raised:
            WorkplaceEnv(str(path), tables=TABLES)
        skipping = WorkplaceEnv(str(path), tables=TABLES, on_bad_rows="skip")
    message = str(raised.value)
    assert f"{path}:2 (id ghost-delete)" in message and "ground_truth[0] (email_delete_email)" in message
    assert "Email not found." in message
    assert len(skipping.tasks or []) == 1 and skipping.tasks.skipped == 1
    skipping.close()


def test_two_concurrent_episodes_of_one_task_share_no_state(env, tasks):
    task = tasks["delete"]
    (email_id,) = [json.loads(c["arguments"])["email_id"] for c in task["ground_truth"]]
    fetch = call_text("email_get_email_information_by_id", email_id=email_id, field="subject")

    async def both() -> tuple[tuple[Episode, Reward, list], tuple[Episode, Reward, list]]:
        first, second = await env.astart(env.load(task)), await env.astart(env.load(task))
        seen = []
        for text in solution_texts(task):  # the first deletes; the second looks the email up in between
            await env.aadvance(first, text)
            seen += (await env.aadvance(second, fetch)).observation
        await env.aadvance(first, ANSWER)
        await env.aadvance(second, ANSWER)
        rewards = await asyncio.gather(env.ascore_episodes([first]), env.ascore_episodes([second]))
        await asyncio.gather(env.aend(first), env.aend(second))
        return (first, rewards[0][0], []), (second, rewards[1][0], seen)

    with within(3.0):
        (_, deleted, _), (_, untouched, seen) = asyncio.run(both())
    assert all(not m["content"].startswith("Error") for m in seen)  # still there for the second episode
    assert deleted.value == 1.0 and untouched.value == 0.0
    assert f"row {email_id} should have been deleted" in untouched.reason
    assert email_id in env.workplace["email"]  # the template is untouched too


def test_scoring_a_released_episode_is_masked_with_its_reason(env, tasks):
    task = tasks["send"]

    async def released() -> Reward:
        episode = await env.astart(env.load(task))
        for text in [*solution_texts(task), ANSWER]:
            await env.aadvance(episode, text)
        await env.aend(episode)  # a caller that releases before scoring: the state is gone
        return (await env.ascore_episodes([episode]))[0]

    with within(2.0):
        reward = asyncio.run(released())
    assert reward.masked and reward.value == 0.0 and "released before it was scored" in reward.error
