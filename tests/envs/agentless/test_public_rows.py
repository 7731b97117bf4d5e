"""NeMo Gym's public ``swerl_gen`` and ``swerl_llm_judge`` rows load unchanged, and their scored
rollouts re-score through our parsing as upstream scored them, or the difference is pinned here.

What differs, and why:
- ``swerl_gen`` ``eval`` rows: upstream runs the instance's tests in its container image; we have
  no images and score the patch with the judge or the similarity reward. The three public eval
  rollouts were cut at ``max_output_tokens`` with no patch (upstream reward 0); ours is 0 too, by
  the overlong rule.
- ``swerl_gen`` ``repro-gen`` rows: upstream runs the extracted test before and after the
  reference patch; we extract the same test and mask the reward, saying it needs the image.
- ``swerl_llm_judge`` rows: the same letter and the same 0/1 as upstream on every rollout.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from cascade_envs.core import Completion, TaskError
from cascade_envs.data import prompt_messages
from cascade_envs.env import run_sync
from cascade_envs.envs.agentless.env import AgentlessRepairEnv
from cascade_envs.envs.agentless.gym_modes import chosen_letter
from cascade_envs.envs.agentless.patches import parse_patch
from cascade_envs.envs.agentless.rows import ChoiceSpec, RepairSpec, ReproSpec
from cascade_envs.judges import HTTPJudge
from tests.chat_server import ScriptedChatServer, Step


def read(folder: Path, name: str) -> list[dict[str, Any]]:
    path = folder / name
    if not path.is_file():
        pytest.skip(f"reference data not found at {path}")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def env():
    env = AgentlessRepairEnv(reward="similarity")
    yield env
    env.close()


def reply_text(rollout: dict[str, Any]) -> str:
    """The assistant message text of a rollout, as upstream reads it (reasoning items left out)."""
    texts = [
        part["text"]
        for item in rollout["response"]["output"]
        if item.get("type") == "message"
        for part in item["content"]
        if isinstance(part.get("text"), str)
    ]
    return "\n".join(texts).strip()


def row_of(rollout: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The example row a rollout played (matched by its prompt)."""
    prompt = rollout["responses_create_params"]["input"][0]["content"]
    (row,) = [r for r in rows if r["responses_create_params"]["input"][0]["content"] == prompt]
    return row


def as_edits(patch: str) -> str:
    """A reference patch written as SEARCH/REPLACE edits (one per hunk) inside a <solution> block."""
    blocks = []
    for file_patch in parse_patch(patch):
        for hunk in file_patch.hunks:
            old = [line[1:] for line in hunk[1:] if line[:1] in (" ", "-")]
            new = [line[1:] for line in hunk[1:] if line[:1] in (" ", "+")]
            blocks.append(
                f"```python\n### {file_patch.new}\n<<<<<<< SEARCH\n"
                + "\n".join(old)
                + "\n=======\n"
                + "\n".join(new)
                + "\n>>>>>>> REPLACE\n```"
            )
    return "<solution>\n" + "\n\n".join(blocks) + "\n</solution>"


# ----- swerl_gen ----------------------------------------------------------------------------------------


def test_swerl_gen_rows_load_unchanged(env: AgentlessRepairEnv, shared_data: Path):
    rows = read(shared_data / "nemo-gym-rows" / "swerl_gen", "example.jsonl")
    kinds = []
    for row in rows:
        task = env.load_task(row)
        assert env.prompt(task) == prompt_messages(row)  # the row's own prompt, unchanged
        kinds.append((row["mode"], type(task.spec)))
    assert sorted(set(kinds), key=str) == sorted({("eval", RepairSpec), ("repro-gen", ReproSpec)}, key=str)


def test_swerl_gen_eval_rows_reward_their_reference_fix(env: AgentlessRepairEnv, shared_data: Path):
    rows = [
        r for r in read(shared_data / "nemo-gym-rows" / "swerl_gen", "example.jsonl") if r["mode"] == "eval"
    ]
    for row in rows:
        answer = "<think>\nThe fix.\n</think>\n" + as_edits(row["instance"]["patch"])
        reward = run_sync(env.areward(row, answer))
        assert reward.value == 1.0, (row["instance"]["instance_id"], reward.reason)
        assert reward.components["model_patch"].startswith("diff --git a/")
        # the prompt asks for a <solution> block: edits outside one are a format error, as upstream
        bare = run_sync(
            env.areward(
                row, as_edits(row["instance"]["patch"]).replace("<solution>", "").replace("</solution>", "")
            )
        )
        assert bare.value == -1.0 and "<solution>" in bare.reason


def test_swerl_gen_eval_rollouts_cut_at_the_limit_score_zero_as_upstream(
    env: AgentlessRepairEnv, shared_data: Path
):
    folder = shared_data / "nemo-gym-rows" / "swerl_gen"
    rows = read(folder, "example.jsonl")
    rollouts = [r for r in read(folder, "example_rollouts.jsonl") if row_of(r, rows)["mode"] == "eval"]
    assert len(rollouts) == 3
    for rollout in rollouts:
        assert rollout["reward"] == 0.0 and rollout["model_patch"] is None
        assert rollout["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
        row = row_of(rollout, rows)
        cut = run_sync(env.areward(row, Completion(reply_text(rollout), finish_reason="length")))
        assert (cut.value, cut.masked) == (0.0, False) and "overlong" in cut.reason
        # the text alone (no finish reason) is an unterminated <think> block: the same 0
        text_only = run_sync(env.areward(row, reply_text(rollout)))
        assert (text_only.value, text_only.masked) == (0.0, False) and "overlong" in text_only.reason


def test_swerl_gen_repro_rollouts_extract_upstreams_test_and_mask_the_reward(
    env: AgentlessRepairEnv, shared_data: Path
):
    folder = shared_data / "nemo-gym-rows" / "swerl_gen"
    rows = read(folder, "example.jsonl")
    rollouts = [r for r in read(folder, "example_rollouts.jsonl") if row_of(r, rows)["mode"] == "repro-gen"]
    assert sorted(r["reward"] for r in rollouts) == [0.0, 1.0]  # upstream ran them: one reproduced, one not
    for rollout in rollouts:
        row = row_of(rollout, rows)
        reward = run_sync(env.areward(row, reply_text(rollout)))
        assert (
            reward.masked and "container image" in reward.error and row["metadata"]["image"] in reward.error
        )
        upstream = json.loads(base64.b64decode(rollout["repro_test_info_base64"]))
        (test_patch,) = upstream["test_patch"]
        added = [
            line[1:] for line in test_patch.split("\n") if line.startswith("+") and not line.startswith("+++")
        ]
        assert reward.components["test_script"].split("\n") == added
        # an answer without a test is masked too: a 0 there would let a model choose a mask over a 0
        no_test = run_sync(env.areward(row, "I would write a test that imports dask."))
        assert no_test.masked and "container image" in no_test.error
        assert no_test.components["test_script"] is None


def test_a_judge_grades_public_eval_rows_too(shared_data: Path):
    rows = [
        r for r in read(shared_data / "nemo-gym-rows" / "swerl_gen", "example.jsonl") if r["mode"] == "eval"
    ]
    with ScriptedChatServer(default=Step("SCORE: 4")) as server:
        env = AgentlessRepairEnv(judge_url=HTTPJudge(server.url, model="judge", timeout_s=2, max_retries=0))
        try:
            reward = run_sync(env.areward(rows[0], as_edits(rows[0]["instance"]["patch"])))
        finally:
            env.close()
    assert reward.value == pytest.approx(0.4)
    prompt = server.requests[0]["messages"][1]["content"]
    assert (
        rows[0]["instance"]["patch"].strip() in prompt
        and rows[0]["instance"]["problem_statement"][:60] in prompt
    )


def test_remove_repo_name_rows_name_files_without_the_repository_folder(
    env: AgentlessRepairEnv, shared_data: Path
):
    (row,) = [
        r
        for r in read(shared_data / "nemo-gym-rows" / "swerl_gen", "example.jsonl")
        if r["instance"]["instance_id"] == "python__mypy-17071"
    ]
    files = json.loads(row["metadata"]["relevant_file_contents"])
    prefixed = {
        **row,
        "metadata": {
            **row["metadata"],
            "remove_repo_name": True,
            "relevant_file_contents": json.dumps({f"mypy/{k}": v for k, v in files.items()}),
        },
    }
    answer = as_edits(row["instance"]["patch"]).replace(
        "### mypy/typetraverser.py", "### mypy/mypy/typetraverser.py"
    )
    reward = run_sync(env.areward(prefixed, answer))
    assert reward.value == 1.0
    assert reward.components["model_patch"].startswith(
        "diff --git a/mypy/typetraverser.py b/mypy/typetraverser.py"
    )


# ----- swerl_llm_judge ------------------------------------------------------------------------------------


def test_swerl_llm_judge_rows_load_unchanged(env: AgentlessRepairEnv, shared_data: Path):
    for row in read(shared_data / "nemo-gym-rows" / "swerl_llm_judge", "example.jsonl"):
        task = env.load_task(row)
        assert isinstance(task.spec, ChoiceSpec) and task.spec.grading_mode == row["grading_mode"]


def test_swerl_llm_judge_rollouts_rescore_as_upstream(env: AgentlessRepairEnv, shared_data: Path):
    folder = shared_data / "nemo-gym-rows" / "swerl_llm_judge"
    rows, rollouts = read(folder, "example.jsonl"), read(folder, "example_rollouts.jsonl")
    assert {r["reward"] for r in rollouts} == {0.0, 1.0}
    for rollout in rollouts:
        reward = run_sync(env.areward(row_of(rollout, rows), reply_text(rollout)))
        assert reward.value == rollout["reward"] and not reward.masked
        assert reward.components["extracted_answer"] == rollout["extracted_answer"]
        assert reward.components["expected_answer"] == rollout["expected_answer"]


@pytest.mark.parametrize(
    ("answer", "strict", "lenient"),
    [
        ("<solution>B</solution>", "B", "B"),
        ("<solution> [b] </solution>", "B", "B"),
        ("<solution>Fix B</solution>", None, "B"),
        ("<solution>B or A</solution>", None, "B"),
        ("<solution>Both</solution>", None, None),
        ("<solution>C</solution>", None, None),  # not an option
        ("<SOLUTION>A</SOLUTION>", None, "A"),  # upstream's lenient pattern ignores case, strict does not
        ("<solution>A</solution> then <solution>B</solution>", "A", "B"),  # strict: first, lenient: last
        ("<solution>Z, then A</solution>", None, None),  # lenient stops at the first lone letter
        ("The answer is B.", None, None),
        ("<solution>A" * 50_000, None, None),  # many unclosed tags: linear, no answer
    ],
)
def test_choice_grading_modes(answer: str, strict: str | None, lenient: str | None):
    assert chosen_letter(answer, ("A", "B"), "strict") == strict
    assert chosen_letter(answer, ("A", "B"), "lenient") == lenient


def test_choice_rows_are_validated(env: AgentlessRepairEnv):
    row = {"prompt": "Which fix?", "options": [{"A": "diff a"}, {"B": "diff b"}], "expected_answer": "B"}
    assert env.load_task(row).spec.grading_mode == "lenient"  # upstream's default
    assert run_sync(env.areward(row, "<solution>B</solution>")).value == 1.0
    assert run_sync(env.areward(row, "<solution>A</solution>")).reason == "chose A, expected B"
    assert env.load_task({**row, "expected_answer": ["b", "A"]}).spec.gold == ("B", "A")
    for change, field in [
        ({"expected_answer": "C"}, "expected_answer"),
        ({"options": [{"AB": "x"}]}, "options"),
        ({"grading_mode": "fuzzy"}, "grading_mode"),
        ({"options": []}, "options"),
    ]:
        with pytest.raises(TaskError) as caught:
            env.load_task({**row, **change})
        assert caught.value.field == field
