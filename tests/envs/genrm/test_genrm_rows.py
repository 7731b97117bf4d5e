"""cascade/GenRM-v0 on NeMo Gym's public ``genrm_compare`` rows, and parity with upstream's aggregation.

The public rollouts file (``example_rollouts.jsonl``) records the rows as the agent sent them but no
policy responses, judge replies or rewards, so there is nothing recorded to replay; the parity check
below feeds judge replies in upstream's JSON verdict format instead and compares with the rewards
upstream's "simple_tiebreaker" aggregation gives for them, worked out by hand.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from cascade_envs.env import run_sync
from cascade_envs.envs.genrm.env import GenRMEnv
from cascade_envs.testing import ScriptedJudge
from tests.chat_server import ScriptedChatServer, Step

from .scripted import responses_of, rubric_reply

UPSTREAM_DEFAULTS = {
    "strategy": "circular",
    "reasoning_bonus": 0.0,
    "answer_bonus": 0.0,
    "reasoning_length_coeff": 0.0,
    "answer_length_coeff": 0.0,
}
ANSWERS = [
    "Tests catch regressions early and document intended behaviour.",
    "Unit testing is good.",
    "1. Faster debugging: a failing test points at the broken unit.\n2. Safer refactoring.",
]
VERDICTS = {  # (response 1, response 2) -> upstream's JSON verdict
    (0, 1): '{"score_1": 4, "score_2": 2, "ranking": 2}',
    (1, 2): '{"score_1": 3, "score_2": 3, "ranking": 5}',
    (2, 0): '{"score_1": 5, "score_2": 4, "ranking": 2}',
}


def read_rows(shared_data: Path, name: str) -> list[dict]:
    path = shared_data / "nemo-gym-rows" / "genrm_compare" / name
    if not path.is_file():
        pytest.skip(f"reference rows not found at {path}")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def env():
    env = GenRMEnv([], judge_url=ScriptedJudge(rubric_reply))
    yield env
    env.close()


@pytest.mark.parametrize("name", ["example.jsonl", "example_rollouts.jsonl"])
def test_public_rows_load_unchanged(env, shared_data, name):
    rows = read_rows(shared_data, name)
    assert len(rows) == 5
    for row in rows:
        original = copy.deepcopy(row)
        task = env.load_task(row)
        assert row == original  # the row is read, never changed
        messages = env.prompt(task)
        assert messages == [
            {"role": m["role"], "content": m["content"]} for m in row["responses_create_params"]["input"]
        ]
        assert messages[-1]["role"] == "user"


def test_public_rows_play_through_the_env(env, shared_data):
    for row in read_rows(shared_data, "example.jsonl"):
        observation, info = run_sync(env.areset(options={"task": row}))
        assert observation[-1] == row["responses_create_params"]["input"][-1] and info["thinking"] is True


def test_the_public_rollouts_record_no_judge_replies_to_replay(shared_data):
    recorded = {key for row in read_rows(shared_data, "example_rollouts.jsonl") for key in row}
    assert recorded == {"responses_create_params", "agent_ref", "dataset"}, (
        f"the rollouts now carry {sorted(recorded)}: replay their judge replies through parse_verdict and "
        "aggregate_group and compare with their rewards"
    )


def scripted_verdicts(fail: tuple[int, int] | None = None):
    def script(request: dict) -> Step:
        first, second = responses_of(request["messages"])
        pair = (ANSWERS.index(first), ANSWERS.index(second))
        return Step("I cannot decide." if pair == fail else VERDICTS[pair])

    return script


def score_unit_testing_row(shared_data, script, **kwargs):
    row = read_rows(shared_data, "example.jsonl")[4]
    assert row["responses_create_params"]["input"][0]["content"] == "List two benefits of unit testing."
    with ScriptedChatServer(script) as server:
        env = GenRMEnv(
            [],
            judge_url=server.url,
            judge_model="genrm",
            prompt_format="roles",
            **UPSTREAM_DEFAULTS,
            **kwargs,
        )
        try:
            return run_sync(env.ascore_responses(row, ANSWERS)), server.requests
        finally:
            env.close()


def test_upstream_verdicts_give_upstreams_rewards(shared_data):
    rewards, requests = score_unit_testing_row(shared_data, scripted_verdicts())
    # circular pairs 0-1, 1-2, 2-0; 1-2 is a 3/3 tie ranked 5: shift 3.5 - 5 = -1.5 -> 1.5 / 4.5
    # upstream: 0 -> (4 + 4) / 2 = 4.0; 1 -> (2 + 1.5) / 2 = 1.75; 2 -> (4.5 + 5) / 2 = 4.75
    assert [r.value for r in rewards] == pytest.approx([4.0, 1.75, 4.75])
    assert len(requests) == 3
    assert requests[0]["messages"][0] == {"role": "user", "content": "List two benefits of unit testing."}
    assert [m["role"] for m in requests[0]["messages"]] == ["user", "response_1", "response_2"]


def test_a_failed_comparison_is_left_out_where_upstream_counts_a_neutral_3(shared_data):
    rewards, requests = score_unit_testing_row(shared_data, scripted_verdicts(fail=(1, 2)), parse_retries=3)
    assert len(requests) == 2 + 4  # the failing pair is asked 1 + 3 times, as upstream's genrm_parse_retries
    # upstream falls back to (3, 3, 3.5) for 1-2: 1 -> (2 + 3) / 2 = 2.5, 2 -> (3 + 5) / 2 = 4.0.
    # Here the failed comparison carries no information: 1 -> 2.0, 2 -> 5.0 (each on its one verdict).
    assert [r.value for r in rewards] == pytest.approx([4.0, 2.0, 5.0])
    assert [r.components["failed_comparisons"] for r in rewards] == [0, 1, 1]
    assert not any(r.masked for r in rewards)
