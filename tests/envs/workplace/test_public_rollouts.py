"""NeMo Gym's five scored workplace_assistant rollouts (GPT-4.1), replayed through our env on the WorkBench tables.

For each rollout: every call the model made runs through our tools in the same turns, and (a) our
tool message is what NeMo Gym's server returned for it (NeMo Gym wraps each result as
``{"output": value}``; we send the value itself, a string as is, anything else as JSON), and
(b) our reward is the recorded one.

The rollout rows carry no ground truth, and NeMo Gym's repository has these prompts only in the
rollouts (its task file with ground truth is the Hugging Face dataset, unreachable here), so the
ground truth is derived below from the tables by the task's meaning, following the generators
of WorkBench, from which these tasks come (``olly-styles/WorkBench``,
``scripts/data_generation/query_answer_generation``). Rollout by rollout:

1. "Create a bar chart of total visits since November 30": WorkBench's template plots from the
   date to the day before today (its published answers for this template end at 2023-11-29).
   GPT-4.1 plotted 2023-11-30 .. 2024-06-30, a range into the future that no reading of the task
   gives: 0 (recorded 0).
2. "... customers that haven't responded to a proposal for the consulting product in 3 weeks to
   lost": WorkBench's rule is status Proposal, that product, last contact before now - 3 weeks;
   no customer qualifies, so the ground truth is empty; the model only searched: 1 (recorded 1).
3. "Delete Casey Wilson from the crm": delete the customer of that name: 1.
4. "Add Dakota Thomas as a new lead ... assign them to Nadia": add the customer with status Lead,
   assigned to Nadia's address from the directory: 1.
5. "Delete my last email from kofi": delete kofi's newest email (WorkBench's published answer for
   this very query is ``delete_email("00000259")``, which the derivation finds): 1.

No difference from NeMo Gym remains on these rollouts.
"""

from __future__ import annotations

import asyncio
import csv
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from cascade_envs.envs.workplace.env import WorkplaceEnv

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"
ROLLOUTS = DATA / "nemo-gym-rows" / "workplace_assistant" / "example_rollouts.jsonl"
TABLES = DATA / "workplace-tables"
pytestmark = pytest.mark.skipif(
    not (ROLLOUTS.is_file() and TABLES.is_dir()),
    reason=f"NeMo Gym rollouts or WorkBench tables not found under {DATA}",
)
NOW = datetime(2023, 11, 30, 23, 59)  # the rows' system prompt: "Thursday, 2023-11-30 ... 23:59:00"


def _read(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _table(name: str) -> list[dict[str, str]]:
    with (TABLES / name).open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _call(name: str, **arguments: str) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(arguments)}


def _ground_truth(request: str) -> list[dict[str, str]]:
    """The calls that solve ``request``, derived from the tables (see the module docstring)."""
    if request == "Create a bar chart of total visits since November 30":
        day_before = (NOW - timedelta(days=1)).date().isoformat()
        return [
            _call(
                "analytics_create_plot",
                time_min="2023-11-30",
                time_max=day_before,
                value_to_plot="total_visits",
                plot_type="bar",
            )
        ]
    if "haven't responded to a proposal for the consulting product in 3 weeks" in request:
        cutoff = str(NOW - timedelta(weeks=3))
        stale = [
            c
            for c in _table("customer_relationship_manager_data.csv")
            if c["status"] == "Proposal"
            and c["product_interest"] == "Consulting"
            and c["last_contact_date"] < cutoff
        ]
        return [
            _call(
                "customer_relationship_manager_update_customer",
                customer_id=c["customer_id"],
                field="status",
                new_value="Lost",
            )
            for c in stale
        ]
    if request == "Delete Casey Wilson from the crm":
        (casey,) = [
            c
            for c in _table("customer_relationship_manager_data.csv")
            if c["customer_name"] == "Casey Wilson"
        ]
        return [_call("customer_relationship_manager_delete_customer", customer_id=casey["customer_id"])]
    if request == "Add Dakota Thomas as a new lead in the crm and assign them to Nadia":
        team = {c["assigned_to_email"] for c in _table("customer_relationship_manager_data.csv")}
        (nadia,) = [address for address in team if "nadia" in address]
        return [
            _call(
                "customer_relationship_manager_add_customer",
                customer_name="Dakota Thomas",
                assigned_to_email=nadia,
                status="Lead",
            )
        ]
    if request == "Delete my last email from kofi":
        kofi = [e for e in _table("emails.csv") if e["sender/recipient"].startswith("kofi")]
        last = max(kofi, key=lambda e: e["sent_datetime"])
        return [_call("email_delete_email", email_id=last["email_id"])]
    raise AssertionError(f"no ground truth for {request!r}")


def _turns(output: list[dict]) -> list[tuple[list[dict], list[str]]]:
    """The model's turns: the calls of each (as our ``<tool_call>`` text will carry them) and NeMo Gym's outputs."""
    turns: list[tuple[list[dict], list[str]]] = []
    for item in output:
        if item["type"] == "function_call":
            if not turns or turns[-1][1]:
                turns.append(([], []))
            turns[-1][0].append(item)
        elif item["type"] == "function_call_output":
            turns[-1][1].append(item["output"])
    return turns


def _reply(calls: list[dict]) -> str:
    return "".join(
        f'<tool_call>{{"name": "{c["name"]}", "arguments": {c["arguments"]}}}</tool_call>' for c in calls
    )


def _same_output(ours: str, theirs: str) -> bool:
    value = json.loads(theirs)["output"]
    return ours == value if isinstance(value, str) else json.loads(ours) == value


@pytest.fixture(scope="module")
def env() -> WorkplaceEnv:
    return WorkplaceEnv(tasks=[], tables=TABLES)


@pytest.mark.parametrize(
    "rollout", _read(ROLLOUTS), ids=lambda r: r["responses_create_params"]["input"][-1]["content"][:40]
)
def test_rollout_outputs_and_reward_agree(env, rollout):
    params = rollout["responses_create_params"]
    row = {
        "responses_create_params": {"input": params["input"], "tools": params["tools"]},
        "ground_truth": _ground_truth(params["input"][-1]["content"]),
    }

    async def play():
        episode = await env.astart(env.load(row))
        for calls, outputs in _turns(rollout["response"]["output"]):
            turn = await env.aadvance(episode, _reply(calls))
            assert [m["name"] for m in turn.observation] == [c["name"] for c in calls]
            for message, output in zip(turn.observation, outputs, strict=True):
                assert _same_output(message["content"], output), (message["content"], output)
        final = rollout["response"]["output"][-1]
        assert final["type"] == "message"
        await env.aadvance(episode, final["content"][0]["text"])
        assert episode.terminated
        (reward,) = await env.ascore_episodes([episode])
        await env.aend(episode)
        return reward

    reward = asyncio.run(play())
    assert not reward.masked
    assert reward.value == rollout["reward"], reward.reason


def test_the_derived_ground_truths_are_the_expected_calls():
    """Pin what the derivation finds, so a change in it shows (00000259 is WorkBench's own answer)."""
    assert _ground_truth("Delete my last email from kofi") == [
        _call("email_delete_email", email_id="00000259")
    ]
    assert _ground_truth("Delete Casey Wilson from the crm") == [
        _call("customer_relationship_manager_delete_customer", customer_id="00000014")
    ]
    assert (
        _ground_truth(
            "We need to move all customers that haven't responded to a proposal for the consulting "
            "product in 3 weeks to lost. Can you update the CRM?"
        )
        == []
    )
