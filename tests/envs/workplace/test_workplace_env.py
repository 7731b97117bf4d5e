"""cascade/Workplace-v0: the state comparison, whole episodes with scripted replies, rows, conformance.

Episodes run on the WorkBench tables with NeMo Gym's public example rows (read unchanged).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cascade_envs import TaskError
from cascade_envs.core import Completion
from cascade_envs.data import DataError
from cascade_envs.envs.workplace import crm, email
from cascade_envs.envs.workplace.compare import compare, normalise
from cascade_envs.envs.workplace.env import WorkplaceEnv
from cascade_envs.envs.workplace.tables import Workplace
from cascade_envs.reasoning import NO_ANSWER
from cascade_envs.testing import check_env

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"
ROWS = DATA / "nemo-gym-rows" / "workplace_assistant" / "example.jsonl"
TABLES = DATA / "workplace-tables"
pytestmark = pytest.mark.skipif(
    not (ROWS.is_file() and TABLES.is_dir()),
    reason=f"NeMo Gym rows or WorkBench tables not found under {DATA}",
)


def _rows() -> list[dict]:
    with ROWS.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return _rows()


@pytest.fixture(scope="module")
def env() -> WorkplaceEnv:
    return WorkplaceEnv(tasks=str(ROWS), tables=TABLES)


@pytest.fixture(scope="module")
def template() -> Workplace:
    return Workplace.load(TABLES)


def call(tool: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>"


def solution(row: dict) -> str:
    """The row's ground-truth calls as one reply."""
    return "".join(call(c["name"], **json.loads(c["arguments"])) for c in row["ground_truth"])


def play(env: WorkplaceEnv, row: dict, *replies: str | Completion):
    """Play ``replies`` as the model's turns; return the reward, the episode and the tool messages."""

    async def run():
        episode = await env.astart(env.load(row))
        observed = []
        for reply in replies:
            if episode.done:
                break
            observed.append((await env.aadvance(episode, reply)).observation)
        if not episode.done:
            await env.atruncate(episode, "test: the replies ran out")
        (reward,) = await env.ascore_episodes([episode])
        await env.aend(episode)
        return reward, episode, observed

    return asyncio.run(run())


# ----- the comparison -----------------------------------------------------------------------------


def test_normalisation_rules():
    assert normalise("body", "  Thanks  for\nthe UPDATE ") == normalise("body", "thanks for the update")
    assert normalise("status", "Lost") != normalise("status", "lost")  # a checked vocabulary keeps its case
    assert normalise("event_start", "2023-12-01 09:00") == normalise("event_start", "2023-12-01T09:00:00")
    assert normalise("due_date", "2023-12-01") == normalise("due_date", "2023-12-01 00:00:00")
    assert normalise("notes", "   ") is None and normalise("notes", None) is None
    assert normalise("event_start", "next friday") == "next friday"


def test_equal_after_normalisation_and_different_on_a_real_change(template):
    shouted, plain, other = template.fresh(), template.fresh(), template.fresh()
    email.email_reply_email(shouted, email_id="00000057", body="  THANKS for the update\n")
    email.email_reply_email(plain, email_id="00000057", body="Thanks for the update")
    email.email_reply_email(other, email_id="00000057", body="Thanks for the upgrade")
    assert compare(plain.snapshot(), shouted.snapshot()).equal
    verdict = compare(plain.snapshot(), other.snapshot())
    assert not verdict.equal and verdict.tables == ("email",)
    assert "a new row is missing" in verdict.reason and "'Thanks for the update'" in verdict.reason
    assert "an unexpected new row" in verdict.reason and "'Thanks for the upgrade'" in verdict.reason
    assert compare(template.snapshot(), template.fresh().snapshot()).equal


def test_order_of_independent_writes_does_not_matter(template):
    one, two = template.fresh(), template.fresh()
    email.email_send_email(one, recipient="a@x.io", subject="A", body="a")
    email.email_send_email(one, recipient="b@x.io", subject="B", body="b")
    crm.customer_relationship_manager_update_customer(
        one, customer_id="00000014", field="status", new_value="Won"
    )
    crm.customer_relationship_manager_delete_customer(one, customer_id="00000015")
    crm.customer_relationship_manager_delete_customer(two, customer_id="00000015")
    crm.customer_relationship_manager_update_customer(
        two, customer_id="00000014", field="status", new_value="Won"
    )
    email.email_send_email(two, recipient="b@x.io", subject="B", body="b")
    email.email_send_email(two, recipient="a@x.io", subject="A", body="a")
    assert (
        one["email"].get("500")["subject"] == "A" and two["email"].get("500")["subject"] == "B"
    )  # ids differ
    assert compare(one.snapshot(), two.snapshot()).equal
    email.email_send_email(
        two, recipient="a@x.io", subject="A", body="a"
    )  # the same email twice is two emails
    verdict = compare(one.snapshot(), two.snapshot())
    assert not verdict.equal and "an unexpected new row" in verdict.differences[0]


def test_differences_are_bounded_and_name_rows(template):
    edited = template.fresh()
    for customer in ("00000014", "00000015", "00000016", "00000017", "00000018", "00000019", "00000020"):
        crm.customer_relationship_manager_update_customer(
            edited, customer_id=customer, field="customer_name", new_value="Nobody"
        )
    verdict = compare(template.snapshot(), edited.snapshot())
    assert len(verdict.differences) == 5 and verdict.more == 2 and verdict.reason.endswith("; and 2 more")
    assert verdict.differences[0] == (
        "customer_relationship_manager: row 00000014: customer_name is 'Nobody', expected 'Casey Wilson'"
    )
    gone = template.fresh()
    email.email_delete_email(gone, email_id="00000057")
    assert compare(template.snapshot(), gone.snapshot()).differences == (
        "email: row 00000057 was deleted but should remain",
    )
    assert compare(gone.snapshot(), template.snapshot()).differences == (
        "email: row 00000057 should have been deleted",
    )


# ----- episodes -----------------------------------------------------------------------------------


def test_the_ground_truth_earns_one_and_nothing_earns_zero(env, rows):
    for row in rows:
        reward, episode, observed = play(env, row, solution(row), "Done.")
        assert reward.value == 1.0 and not reward.masked, (row["id"], reward.reason)
        assert episode.terminated and not episode.truncated
        assert all(not m["content"].startswith("Error") for m in observed[0])
        assert reward.components["tool_calls"] == len(row["ground_truth"])
        nothing, _, _ = play(env, row, "I have done it.")  # no tool call at all on a write task
        assert nothing.value == 0.0 and not nothing.masked and "differs" in nothing.reason


def test_a_wrong_id_earns_zero(env, rows):
    reply_row = rows[0]  # reply to carlos's email 00000057
    wrong = call(
        "email_reply_email",
        email_id="00000058",
        body="Thanks for the update - I will get back to you tomorrow.",
    )
    reward, _, _ = play(env, reply_row, wrong, "Done.")
    assert reward.value == 0.0 and not reward.masked and "email" in reward.components["tables"]
    event_row = rows[1]  # rename the last event of December 1 (00000252)
    reward, _, _ = play(
        env,
        event_row,
        call(
            "calendar_update_event",
            event_id="00000261",
            field="event_name",
            new_value="Risk Management Forum",
        ),
        "Done.",
    )
    assert reward.value == 0.0 and "row 00000252" in reward.reason


def test_read_only_calls_never_change_the_reward(env, rows):
    row = rows[2]
    reads = (
        call("company_directory_find_email_address", name="akira")
        + call(
            "customer_relationship_manager_search_customers",
            assigned_to_email="akira.sato@atlas.com",
            product_interest="Software",
            page_size=50,
        )
        + call("email_search_emails", query="software")
        + call("analytics_total_visits_count")
    )
    assert play(env, row, reads, solution(row), reads, "Reassigned.")[0].value == 1.0
    assert play(env, row, reads, reads, "Reassigned.")[0].value == 0.0


def test_a_final_reply_is_needed(env, rows):
    assert play(env, rows[2], solution(rows[2]), "Reassigned.")[0].value == 1.0
    for empty in (
        "",
        "  \n",
        "<think>done</think>",
        "\u200b",
        "\u200b\u200c\u200d\u2060\ufeff",
        "<think>done</think>\u3164\u2800\u00a0\u00ad",
        "<THINK>done</THINK>",
    ):
        reward, episode, _ = play(env, rows[2], solution(rows[2]), empty)
        assert episode.terminated and reward.value == 0.0 and not reward.masked
        assert reward.reason == NO_ANSWER, ascii(empty)


def test_read_only_task(env, rows):
    question = {
        **rows[0],
        "id": "question",
        "ground_truth": [],
        "responses_create_params": {
            **rows[0]["responses_create_params"],
            "input": [
                rows[0]["responses_create_params"]["input"][0],
                {"role": "user", "content": "How many emails has kofi sent me?"},
            ],
        },
    }
    look = call("email_search_emails", query="kofi", page_size=1)
    reward, _, observed = play(env, question, look, "Kofi has sent you 26 emails.")
    assert reward.value == 1.0 and '"total_emails": 26' in observed[0][0]["content"]
    assert play(env, question, "Kofi has sent you 26 emails.")[0].value == 1.0  # reading is not required
    wrote, _, _ = play(env, question, look + call("email_delete_email", email_id="00000259"), "26.")
    assert wrote.value == 0.0 and "row 00000259 was deleted" in wrote.reason
    assert play(env, question, look, "")[0].value == 0.0
    short = WorkplaceEnv(tasks=[], tables=TABLES, max_turns=2)
    cut, episode, _ = play(short, question, look, look, "26")
    assert (
        episode.truncated and cut.value == 0.0 and "answered in the final reply, and none came" in cut.reason
    )


def test_turn_limit_scores_the_state_like_nemo_gym(rows):
    env = WorkplaceEnv(tasks=[], tables=TABLES, max_turns=2)
    row = rows[3]  # four deletions
    calls = [call(c["name"], **json.loads(c["arguments"])) for c in row["ground_truth"]]
    done, episode, _ = play(env, row, "".join(calls[:2]), "".join(calls[2:]), "never played")
    assert episode.truncated and episode.turns == 2
    assert done.value == 1.0 and done.reason.startswith("truncated: turn limit of 2")
    half, _, _ = play(env, row, calls[0], calls[1], "never played")
    assert half.value == 0.0 and half.reason.startswith("truncated: turn limit")


def test_a_reply_cut_at_the_length_limit_runs_nothing_and_earns_zero(env, rows):
    cut = Completion(solution(rows[2]), finish_reason="length")
    reward, episode, observed = play(env, rows[2], cut)
    assert episode.truncated and observed == [[]] and reward.value == 0.0 and not reward.masked


def test_calls_inside_reasoning_do_not_run(env, rows):
    thinking = f"<think>Maybe {solution(rows[2])}</think>I will not change anything."
    reward, episode, observed = play(env, rows[2], thinking)
    assert episode.terminated and observed == [[]] and reward.value == 0.0


def test_mistakes_get_error_messages_and_the_episode_goes_on(env, rows):
    row = rows[2]
    broken = (
        '<tool_call>{"name": "customer_relationship_manager_update_customer", "arguments": {oops}</tool_call>'
        + call("crm_update", customer_id="00000095")
        + call("customer_relationship_manager_update_customer", customer_id=95, field="status")
        + call("customer_relationship_manager_delete_customer", customer_id="00000999")
    )
    reward, _, observed = play(env, row, broken, solution(row), "Done.")
    first = [m["content"] for m in observed[0]]
    assert len(first) == 4 and all(text.startswith("Error: ") for text in first)
    assert "unknown tool 'crm_update'" in first[0]
    assert "customer_id" in first[1] and "new_value" in first[1]
    assert first[2] == "Error: Customer not found."
    assert "invalid JSON" in first[3]
    assert reward.value == 1.0 and reward.components["tool_errors"] == 4


def test_null_arguments_count_as_not_given(env, rows):
    search = call(
        "customer_relationship_manager_search_customers", customer_name="Casey Wilson", status=None, page=None
    )
    reward, _, observed = play(env, rows[2], search, solution(rows[2]), "Done.")
    assert json.loads(observed[0][0]["content"])["customers"][0]["customer_id"] == "00000014"
    assert reward.value == 1.0 and reward.components["tool_errors"] == 0


def test_too_many_calls_in_one_reply(rows):
    env = WorkplaceEnv(tasks=[], tables=TABLES, max_calls_per_turn=3)
    row = rows[2]
    many = solution(row) + call("email_search_emails", query="x") * 497
    reward, _, observed = play(env, row, many, "Done.")
    assert len(observed[0]) == 4 and observed[0][-1]["content"].startswith(
        "Error: only the first 3 tool calls of a reply run; 497 more were not run (email_search_emails, "
    )
    assert reward.value == 1.0 and reward.components["tool_calls"] == 3


def test_two_concurrent_episodes_of_one_task_share_no_state(env, rows):
    row = rows[3]

    async def run():
        right, wrong = await env.astart(env.load(row)), await env.astart(env.load(row))
        await asyncio.gather(
            env.aadvance(right, solution(row)),
            env.aadvance(
                wrong, call("customer_relationship_manager_delete_customer", customer_id="00000014")
            ),
        )
        await asyncio.gather(env.aadvance(right, "Done."), env.aadvance(wrong, "Done."))
        rewards = await env.ascore_episodes([right, wrong])
        assert "00000014" in right.state.workplace["customer_relationship_manager"]
        assert "00000009" in wrong.state.workplace["customer_relationship_manager"]
        await asyncio.gather(env.aend(right), env.aend(wrong))
        assert right.state is None and wrong.state is None
        return rewards

    right, wrong = asyncio.run(run())
    assert (right.value, wrong.value) == (1.0, 0.0)
    assert env.workplace["customer_relationship_manager"].get("00000014") is not None


# ----- rows ---------------------------------------------------------------------------------------


def test_rows_are_read_unchanged_and_announce_their_tools(env, rows):
    assert [t.row for t in env.tasks] == rows
    system = env.prompt(env.load_task(rows[0]))[0]["content"]
    assert (
        system.startswith("Today's date is Thursday, 2023-11-30") and system.count('"type": "function"') == 27
    )
    bare = {k: v for k, v in rows[0].items() if k != "responses_create_params"}
    bare["responses_create_params"] = {"input": rows[0]["responses_create_params"]["input"]}
    ours = env.prompt(env.load_task(bare))[0]["content"]
    assert ours.count('"type": "function"') == 27 and "Send an email." in ours  # our own descriptions
    assert play(env, bare, solution(rows[0]), "Done.")[0].value == 1.0


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"ground_truth": {"name": "email_delete_email"}}, "ground_truth", "expected a list"),
        ({"ground_truth": [{"name": "email_purge", "arguments": "{}"}]}, "ground_truth", "does not announce"),
        (
            {"ground_truth": [{"name": "email_delete_email", "arguments": "{email_id"}]},
            "ground_truth",
            "not valid JSON",
        ),
        (
            {"ground_truth": [{"name": "email_delete_email", "arguments": '{"email_id": 57}'}]},
            "ground_truth",
            "expected string",
        ),
        (
            {"ground_truth": [{"name": "email_delete_email", "arguments": '{"email_id": "1"}'}]},
            "ground_truth",
            "Email not found",
        ),
        ({"category": 3}, "category", "string"),
        (
            {"responses_create_params": {"input": [{"role": "user", "content": "Delete my last email."}]}},
            "responses_create_params.input",
            "today's date",
        ),
        (
            {
                "responses_create_params": {
                    "input": "Today is 2023-11-30.",
                    "tools": [{"name": "rm_rf", "parameters": {}}],
                }
            },
            "responses_create_params.tools",
            "rm_rf",
        ),
    ],
)
def test_bad_rows_name_their_field(env, rows, change, field, message):
    with pytest.raises(TaskError, match=message) as caught:
        env.load_task({**rows[0], **change})
    assert caught.value.field == field


def test_a_ground_truth_that_fails_on_the_tables_rejects_the_row_at_load(rows, tmp_path):
    path = tmp_path / "tasks.jsonl"
    failing = {
        **rows[1],
        "id": 41,
        "ground_truth": [
            {
                "name": "calendar_update_event",
                "arguments": '{"event_id": "00000252", "field": "room", "new_value": "A"}',
            }
        ],
    }
    path.write_text("\n".join(json.dumps(r) for r in (rows[0], failing)) + "\n")
    with pytest.raises(
        DataError,
        match=rf"{path}:2 \(id 41\): field 'ground_truth': ground_truth\[0\] "
        r"\(calendar_update_event\) fails on the tables in .*: Invalid field",
    ):
        WorkplaceEnv(tasks=str(path), tables=TABLES)
    kept = WorkplaceEnv(tasks=str(path), tables=TABLES, on_bad_rows="skip")
    assert [t.row for t in kept.tasks] == [rows[0]] and kept.tasks.skipped == 1


def test_constructor_arguments():
    with pytest.raises(ValueError, match="max_calls_per_turn"):
        WorkplaceEnv(tasks=[], tables=TABLES, max_calls_per_turn=0)
    assert WorkplaceEnv(tasks=[], tables=TABLES).max_turns == 6  # NeMo Gym's max_steps


def test_conformance(env, rows):
    row = rows[2]  # idempotent writes: the conformance runner replays the good answer every turn
    wrong = "".join(
        call(
            "customer_relationship_manager_update_customer",
            customer_id=c,
            field="assigned_to_email",
            new_value="raj.patel@atlas.com",
        )
        for c in ("00000095", "00000080", "00000036")
    )
    check_env(
        env,
        good_row=row,
        good_answer=solution(row),
        bad_answer=wrong,
        bad_rows=[
            ({**row, "ground_truth": "[{"}, "ground_truth"),
            (
                {
                    **row,
                    "ground_truth": [
                        {
                            "name": "customer_relationship_manager_delete_customer",
                            "arguments": '{"customer_id": "42"}',
                        }
                    ],
                },
                "ground_truth",
            ),
        ],
    )
