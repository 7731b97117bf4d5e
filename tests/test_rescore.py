"""``cascade-envs rescore``: stored rewards reproduced, masked rows fixed once the judge is back, resumed
after a kill, NeMo Gym rollouts (0.4 and 0.7 layouts) rescored, malformed records reported one by
one, and no stored field that steers the new verdict.

Results are made the way users make them (``eval``, ``solve``, ``filter`` on the CLI or the runner)
against local scripted servers; the long-context env is the judged one, with a judge that answers
CORRECT unless the answer says Lyon.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cascade_envs import Reward, register
from cascade_envs.cli import main
from cascade_envs.data import resolve_path
from cascade_envs.env_set import EnvSet
from cascade_envs.judges import JUDGE_URL_ENV
from cascade_envs.registry import envs
from cascade_envs.rescore import RescoreError, rescore
from cascade_envs.rollout import RolloutRunner
from cascade_envs.testing import ScriptedPolicy
from tests.chat_server import ScriptedChatServer, Step
from tests.toy_envs import ExactAnswerEnv, ExactTask

LC = "cascade/LongContextQA-v0"
CAPITALS = {"France": ("Paris", "Paris"), "Italy": ("Rome", "Lyon"), "Germany": ("Berlin", "Berlin"),
            "Spain": ("Madrid", "Lyon"), "Japan": ("Tokyo", "Tokyo")}  # fmt: skip
"""Country: (reference, the policy's answer): Lyon is wrong."""


@pytest.fixture(autouse=True)
def _no_judge_variable(monkeypatch):
    monkeypatch.delenv(JUDGE_URL_ENV, raising=False)  # --judge-url sets it; restored after each test


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def changes(summary: Any) -> dict[str, int]:
    return {k: v for k, v in summary.total().items() if v}


def judge_script(down: str | None = None) -> Any:
    """CORRECT unless the answer says Lyon; a 503 for questions about ``down`` (a partial outage)."""

    def step(request: dict[str, Any]) -> Step:
        text = json.dumps(request["messages"])
        if down is not None and down in text:
            return Step(status=503, raw=b'{"error": "overloaded"}')
        return Step("INCORRECT" if "Lyon" in text else "CORRECT")

    return step


def policy_server() -> ScriptedChatServer:
    """Answers each capital question with the policy's answer of ``CAPITALS``."""

    def step(request: dict[str, Any]) -> Step:
        country = next(c for c in CAPITALS if c in request["messages"][-1]["content"])
        return Step(f"<think>Recall.</think>{CAPITALS[country][1]}")

    return ScriptedChatServer(step, models=("policy",))


def write_capitals(path: Path) -> None:
    """The capital questions as long-context rows (question, reference; the prompt is the context)."""
    rows = [
        {"id": f"cap-{c}", "prompt": f"Notes: each country has one capital.\nWhat is the capital of {c}?",
         "question": f"What is the capital of {c}?", "expected_answer": reference}
        for c, (reference, _) in CAPITALS.items()
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def judged_eval(tmp_path: Path, judge_url: str, group_size: int = 1) -> Path:
    """``eval`` of the long-context env on the capital questions (judge requests time out at 1 s)."""
    write_capitals(tmp_path / "capitals.jsonl")
    kwargs = {"tasks": str(tmp_path / "capitals.jsonl"), "judge_timeout_s": 1.0, "judge_model": "judge"}
    (tmp_path / "mix.yaml").write_text(json.dumps({"envs": {LC: {"weight": 1, "kwargs": kwargs}}}))
    out = tmp_path / "eval.jsonl"
    with policy_server() as policy:
        args = ["eval", "--mix", str(tmp_path / "mix.yaml"), "--policy", policy.url, "--model", "policy"]
        code = main([*args, "-g", str(group_size), "--judge-url", judge_url, "-o", str(out), "--no-progress"])
    assert code == 0
    return out


def dead_url() -> str:
    with ScriptedChatServer() as dead:
        return dead.url


# ----- eval results ------------------------------------------------------------------------------


def test_eval_results_of_a_rule_based_env_are_reproduced_exactly(tmp_path, capsys):
    rows = resolve_path("bundled:mcqa/easy.jsonl").read_text().splitlines()[:4]
    by_prompt = {
        json.loads(r)["responses_create_params"]["input"][0]["content"]: (i, json.loads(r))
        for i, r in enumerate(rows)
    }

    def step(request: dict[str, Any]) -> Step:  # right on the first two questions, wrong on the others
        i, row = by_prompt[request["messages"][-1]["content"]]
        return Step(f"<think>Hm.</think>The answer is \\boxed{{{row['expected_answer'] if i < 2 else 'Z'}}}.")

    (tmp_path / "tasks.jsonl").write_text("\n".join(rows) + "\n")
    with ScriptedChatServer(step, models=("policy",)) as policy:
        args = ["eval", "--env", "cascade/MCQA-v0", "--tasks", str(tmp_path / "tasks.jsonl"), "-g", "2"]
        assert main([*args, "--policy", policy.url, "-o", str(tmp_path / "eval.jsonl"), "--no-progress"]) == 0
    stored = read(tmp_path / "eval.jsonl")
    assert sorted(r["reward"] for r in stored) == [0.0] * 4 + [1.0] * 4
    assert stored[0]["task_row"] in map(json.loads, rows) and stored[0]["env_kwargs"]["tasks"]
    old = [{k: v for k, v in r.items() if k not in ("task_row", "env_kwargs")} for r in stored]
    (tmp_path / "old.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in old)
    )  # written before they were
    assert changes(rescore(tmp_path / "old.jsonl")) == {"failed": 8}  # not among the env's own tasks
    assert "pass --tasks" in read(tmp_path / "old.rescored.jsonl")[0]["rescore"]["error"]
    summary = rescore(tmp_path / "old.jsonl", tasks=str(tmp_path / "tasks.jsonl"), force=True)
    assert changes(summary) == {"unchanged": 8}
    (tmp_path / "tasks.jsonl").unlink()  # the recorded rows are enough
    capsys.readouterr()
    assert main(["rescore", str(tmp_path / "eval.jsonl"), "--no-progress"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[1].split() == ["cascade/MCQA-v0", "8", "8", "8"] + ["0"] * 7
    rescored = read(tmp_path / "eval.rescored.jsonl")
    assert [r["reward_info"] for r in rescored] == [r["reward_info"] for r in stored]
    assert [{k: v for k, v in r.items() if k != "rescore"} for r in rescored] == stored
    assert [r["rescore"]["line"] for r in rescored] == list(range(1, 9))
    assert {r["rescore"]["change"] for r in rescored} == {"unchanged"}


WORKPLACE = "cascade/Workplace-v0"
DELETE = '<tool_call>{{"name": "email_delete_email", "arguments": {{"email_id": "{}"}}}}</tool_call>'


def workplace_reply(messages: list[dict[str, Any]]) -> str:
    """Task 3 (delete three newsletters): right; task 8: deletes the wrong email; task 1: calls tools forever."""
    request, turns = messages[1]["content"], sum(m["role"] == "assistant" for m in messages)
    if "Parcelgrid" in request:
        return (
            "".join(DELETE.format(i) for i in ("00000033", "00000066", "00000051")) if turns == 0 else "Done."
        )
    if "parking garage" in request:
        return DELETE.format("00000061") if turns == 0 else "<think>Deleted.</think>Done."
    return '<tool_call>{"name": "email_search_emails", "arguments": {"query": "budget"}}</tool_call>'


def test_a_stateful_multi_turn_env_is_played_again_from_its_stored_turns(tmp_path):
    envs = EnvSet({WORKPLACE: {}})
    tasks = {t.row["id"]: t for t in envs.env(WORKPLACE).tasks}
    out = tmp_path / "eval.jsonl"
    RolloutRunner(ScriptedPolicy(workplace_reply), envs=envs, results_path=out).run(
        [(WORKPLACE, tasks[i]) for i in (3, 8, 1)]
    )
    envs.close()
    stored = read(out)
    assert [(r["reward"], r["turns"], r["truncated"]) for r in stored] == [
        (1.0, 2, False),
        (0.0, 2, False),
        (0.0, 6, True),
    ]
    summary = rescore(out)
    assert changes(summary) == {"unchanged": 3}
    rescored = read(tmp_path / "eval.rescored.jsonl")
    assert [r["reward_info"] for r in rescored] == [r["reward_info"] for r in stored]
    assert all("note" not in r["rescore"] for r in rescored)  # every tool answered as when it was played


# ----- judged envs: outage, masked-only, resume --------------------------------------------------


def test_a_judge_outage_stays_masked_and_masked_only_fixes_it_without_touching_the_rest(tmp_path):
    with ScriptedChatServer(judge_script(down="Germany")) as judge:
        out = judged_eval(tmp_path, judge.url)
    stored = read(out)
    masked = [r for r in stored if r["reward_info"]["masked"]]
    assert [r["task_id"] for r in masked] == ["cap-Germany"] and "judge" in masked[0]["reward_info"]["error"]

    dead = dead_url()  # still down: masked with the reason, never a 0
    summary = rescore(out, tmp_path / "still.jsonl", masked_only=True, judge_url=dead)
    assert changes(summary) == {"still masked": 1, "skipped": 4}
    (row,) = [r for r in read(tmp_path / "still.jsonl") if "rescore" in r]
    assert row["reward_info"]["masked"] and "judge call failed" in row["reward_info"]["error"]

    with ScriptedChatServer(default=Step("CORRECT", delay_s=2.0)) as slow:  # every row within --timeout
        summary = rescore(out, tmp_path / "slow.jsonl", masked_only=True, judge_url=slow.url, timeout_s=0.5)
    assert changes(summary) == {"still masked": 1, "skipped": 4} and "took more than 0.5 s" in summary.table()

    with ScriptedChatServer(judge_script()) as judge:  # back
        summary = rescore(out, masked_only=True, judge_url=judge.url, judge_timeout_s=30)
    assert changes(summary) == {"masked->scored": 1, "skipped": 4}
    assert len(judge.requests) == 1 and "Germany" in json.dumps(judge.requests[0])
    rescored = read(tmp_path / "eval.rescored.jsonl")
    assert {r["task_id"]: r["reward"] for r in rescored} == {
        f"cap-{c}": float(a == r) for c, (r, a) in CAPITALS.items()
    }
    assert [r for r in rescored if "rescore" not in r] == [
        r for r in stored if not r["reward_info"]["masked"]
    ]

    with ScriptedChatServer(judge_script()) as judge:  # every row again: the stored scores come back
        summary = rescore(out, tmp_path / "all.jsonl", judge_url=judge.url, judge_timeout_s=30)
    assert changes(summary) == {"unchanged": 4, "masked->scored": 1} and len(judge.requests) == 5


def test_a_killed_run_resumes_without_redoing_rows(tmp_path):
    with ScriptedChatServer(judge_script()) as judge:
        out = judged_eval(tmp_path, judge.url, group_size=2)
    stored = read(out)
    assert len(stored) == 10 and not any(r["reward_info"]["masked"] for r in stored)
    target = tmp_path / "rescored.jsonl"
    verdict = judge_script()

    def hang(request: dict[str, Any]) -> Step:  # the judge stops answering after three requests
        return Step(verdict(request).content, delay_s=0.0 if len(stuck.requests) <= 3 else 60.0)

    with ScriptedChatServer(hang) as stuck:
        command = [sys.executable, "-m", "cascade_envs", "rescore", str(out), "-o", str(target), "--no-progress",
                   "--judge-url", stuck.url, "--judge-timeout", "120", "--concurrency", "1"]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while len(target.read_text().splitlines() if target.exists() else []) < 3:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            process.kill()  # mid-run, the 4th row waiting for its judge
            process.wait()
    assert len(read(target)) == 3
    with target.open("a") as fh:
        fh.write('{"env_id": "cascade/LongCon')  # a line a kill cut short
    with ScriptedChatServer(judge_script()) as judge:
        summary = rescore(out, target, judge_url=judge.url, judge_timeout_s=30)
    assert len(judge.requests) == 7  # the 3 rows written are not asked again
    rescored = read(target)
    assert [r["rescore"]["line"] for r in rescored] == list(range(1, 11))
    assert [r["reward_info"] for r in rescored] == [r["reward_info"] for r in stored]
    assert changes(summary) == {"unchanged": 10}
    with ScriptedChatServer(judge_script()) as judge:  # finished: a rerun asks nothing
        assert changes(rescore(out, target, judge_url=judge.url, judge_timeout_s=30)) == {"unchanged": 10}
    assert judge.requests == []


# ----- NeMo Gym rollouts -------------------------------------------------------------------------


def gym_response(*turns: list[dict[str, Any]]) -> dict[str, Any]:
    """A Responses ``response`` whose output is ``turns`` (items) separated by their tool outputs."""
    output: list[dict[str, Any]] = []
    for turn in turns:
        output += turn
        output += [{"type": "function_call_output", "call_id": i["call_id"], "output": "{}"}
                   for i in turn if i["type"] == "function_call"]  # fmt: skip
    return {"id": "resp", "output": output}


def message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def call(name: str, **arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": f"c-{name}-{len(arguments)}", "name": name,
            "arguments": json.dumps(arguments)}  # fmt: skip


def test_nemo_gym_rollouts_in_both_layouts(tmp_path):
    """0.7 rows (task and rollout indexes, a masked one, a failures-sidecar one) whose task fields are in
    the materialized inputs, 0.4 workplace rows with tool calls matched to ``--tasks`` rows by prompt."""
    mcqa = [json.loads(line) for line in resolve_path("bundled:mcqa/easy.jsonl").read_text().splitlines()[:3]]
    inputs = [{**row, "_ng_task_index": i, "_ng_rollout_index": 0, "agent_ref": {"name": "mcqa_agent"}}
              for i, row in enumerate(mcqa)]  # fmt: skip
    (tmp_path / "inputs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in inputs))
    right = lambda i: gym_response([message(f"\\boxed{{{mcqa[i]['expected_answer']}}}")])  # noqa: E731
    v07 = [
        {**inputs[0], "response": right(0), "reward": 1.0},
        {**inputs[1], "response": right(1), "reward": 0.0, "mask_sample": True},
        {**inputs[2], "response": gym_response([message("\\boxed{Z}")]), "_ng_failure_class": "judge_failed",
         "_ng_failure_terminal": False},
    ]  # fmt: skip
    for rollout in v07:  # the rollout keeps the prompt, not the task's fields
        del rollout["options"], rollout["expected_answer"]
    (tmp_path / "v07.jsonl").write_text("".join(json.dumps(r) + "\n" for r in v07))
    summary = rescore(tmp_path / "v07.jsonl", env_id="cascade/MCQA-v0")
    assert changes(summary) == {"failed": 3} and "field 'options'" in summary.table()
    summary = rescore(
        tmp_path / "v07.jsonl", env_id="cascade/MCQA-v0", tasks=str(tmp_path / "inputs.jsonl"), force=True
    )
    assert changes(summary) == {"unchanged": 1, "masked->scored": 2}
    rescored = read(tmp_path / "v07.rescored.jsonl")
    assert [(r["reward"], r["mask_sample"]) for r in rescored] == [(1.0, False), (1.0, False), (0.0, False)]
    assert "_ng_failure_class" not in rescored[2] and rescored[2]["_ng_task_index"] == 2
    assert (
        rescored[0]["agent_ref"] == {"name": "mcqa_agent"}
        and rescored[2]["rescore"]["change"] == "masked->scored"
    )

    workplace = {
        r["id"]: r
        for r in map(json.loads, resolve_path("bundled:workplace/tasks.jsonl").read_text().splitlines())
    }
    deletes = [call("email_delete_email", email_id=i) for i in ("00000033", "00000066", "00000051")]
    for n, item in enumerate(deletes):
        item["call_id"] = f"c{n}"
    v04 = [
        {"responses_create_params": workplace[3]["responses_create_params"],
         "response": gym_response(deletes, [message("Done.")]), "reward": 1.0},
        {"responses_create_params": workplace[3]["responses_create_params"],  # two of the three: 0
         "response": gym_response(deletes[:2], [message("Done.")]), "reward": 1.0},
        {"responses_create_params": workplace[3]["responses_create_params"],  # no final answer: the state
         "response": gym_response(deletes), "reward": 1.0},  # is scored (the env's truncation rule)
    ]  # fmt: skip
    (tmp_path / "v04.jsonl").write_text("".join(json.dumps(r) + "\n" for r in v04))
    summary = rescore(tmp_path / "v04.jsonl", env_id=WORKPLACE, tasks="bundled:workplace/tasks.jsonl")
    assert changes(summary) == {"unchanged": 2, "1->0": 1}
    rescored = read(tmp_path / "v04.rescored.jsonl")
    assert [r["reward"] for r in rescored] == [1.0, 0.0, 1.0]
    assert "line 2 (cascade/Workplace-v0): 1 -> 0: " in summary.table()


def test_exported_rows_name_their_env_and_row(tmp_path):
    assert (
        main(
            [
                "export",
                "cascade/Math-v0",
                "--format",
                "nemo-gym",
                "-o",
                str(tmp_path / "rows.jsonl"),
                "--limit",
                "2",
            ]
        )
        == 0
    )
    rows = read(tmp_path / "rows.jsonl")
    rollouts = [{**row, "response": gym_response([message(f"\\boxed{{{row['cascade_row']['expected_answer']}}}")]),
                 "reward": 0.0} for row in rows]  # fmt: skip
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rollouts))
    summary = rescore(tmp_path / "rollouts.jsonl")  # no --env: the rows name it
    assert changes(summary) == {"0->1": 2}


def test_the_shared_nemo_gym_rollouts(shared_data, tmp_path):
    """Where our verifier agrees with NeMo Gym's the stored reward comes back; the one MCQA rollout
    scored otherwise on purpose (tests/envs/test_mcqa.py) shows in the table."""
    folder = shared_data / "nemo-gym-rows"
    for domain, env_id in [("instruction_following", "cascade/InstructionFollowing-v0"),
                           ("ifbench", "cascade/InstructionFollowing-v0"), ("math_with_judge", "cascade/Math-v0")]:  # fmt: skip
        summary = rescore(
            folder / domain / "example_rollouts.jsonl", tmp_path / f"{domain}.jsonl", env_id=env_id
        )
        assert changes(summary) == {"unchanged": 5}, (domain, summary.table())
    summary = rescore(folder / "mcqa" / "example_rollouts.jsonl", tmp_path / "mcqa.jsonl", env_id="cascade/MCQA-v0",
                      tasks=str(folder / "mcqa" / "example.jsonl"))  # fmt: skip
    assert changes(summary) == {"unchanged": 4, "0->1": 1}
    (changed,) = [r for r in read(tmp_path / "mcqa.jsonl") if r["rescore"]["change"] != "unchanged"]
    (row,) = [
        r
        for r in read(folder / "mcqa" / "example.jsonl")
        if r["uuid"] == "4c36b177-894a-5500-bf75-e4ebdc2b3664"
    ]
    prompt = lambda r: [(m["role"], m["content"]) for m in r["responses_create_params"]["input"]]  # noqa: E731
    assert prompt(changed) == prompt(row)
    summary = rescore(
        folder / "workplace_assistant" / "example_rollouts.jsonl", tmp_path / "w.jsonl", env_id=WORKPLACE
    )
    assert changes(summary) == {"failed": 5} and "ground_truth" in summary.table()  # the rows carry none


# ----- solve and filter ----------------------------------------------------------------------------


def test_solve_results_are_rescored_and_their_outcomes_follow(tmp_path):
    rows = [
        {"id": f"m{i}", "prompt": f"Problem {i}: what is {i} + {i}?", "expected_answer": str(2 * i)}
        for i in range(3)
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with ScriptedChatServer(lambda r: Step("\\boxed{2}"), models=("policy",)) as policy:
        args = [
            "solve",
            "--env",
            "cascade/Math-v0",
            "--tasks",
            str(tmp_path / "tasks.jsonl"),
            "--strategy",
            "best_of_n",
        ]
        assert (
            main(
                [
                    *args,
                    "--candidates",
                    "2",
                    "--policy",
                    policy.url,
                    "-o",
                    str(tmp_path / "solve.jsonl"),
                    "--no-progress",
                ]
            )
            == 0
        )
    stored = read(tmp_path / "solve.jsonl")
    assert changes(rescore(tmp_path / "solve.jsonl")) == {"unchanged": 9}
    assert read(tmp_path / "solve.rescored.jsonl")[0] == stored[0]  # the config line, copied
    forged = [dict(r) for r in stored]
    for r in forged:  # a file whose every answer claims full marks
        if r["kind"] == "attempt":
            r["reward"], r["masked"] = 1.0, False
        elif r["kind"] == "outcome":
            r["reward"] = {**r["reward"], "value": 1.0}
            r["pass_at_n"] = r["selector_correct"] = True
    (tmp_path / "forged.jsonl").write_text("".join(json.dumps(r) + "\n" for r in forged))
    summary = rescore(tmp_path / "forged.jsonl")
    assert changes(summary) == {"unchanged": 3, "1->0": 6}
    outcomes = sorted(
        (r for r in read(tmp_path / "forged.rescored.jsonl") if r["kind"] == "outcome"),
        key=lambda r: r["index"],
    )
    assert [(o["reward"]["value"], o["pass_at_n"], o["selector_correct"]) for o in outcomes] == [
        (0.0, False, None), (1.0, True, True), (0.0, False, None)]  # fmt: skip


def test_a_filter_folder_after_a_judge_outage_is_decided_when_the_judge_is_back(tmp_path):
    write_capitals(tmp_path / "tasks.jsonl")

    def run_filter(out: str, judge: str) -> int:
        with policy_server() as policy:
            args = ["filter", "--env", LC, "--tasks", str(tmp_path / "tasks.jsonl"), "-k", "2", "--policy", policy.url,
                    "--model", "policy", "--env-kwargs", '{"judge_timeout_s": 1.0, "judge_model": "judge"}']  # fmt: skip
            return main([*args, "--judge-url", judge, "-o", str(tmp_path / out), "--no-progress"])

    assert run_filter("down", dead_url()) == 1  # every prompt incomplete
    with ScriptedChatServer(judge_script()) as judge:
        assert run_filter("healthy", judge.url) == 0
        summary = rescore(tmp_path / "down", masked_only=True, judge_url=judge.url, judge_timeout_s=30)
    assert changes(summary) == {"masked->scored": 10}
    for name in ("outcomes.jsonl", "kept.jsonl", "histogram.txt"):
        assert (tmp_path / "down-rescored" / name).read_text() == (tmp_path / "healthy" / name).read_text(), (
            name
        )
    assert [o["outcome"] for o in read(tmp_path / "down-rescored" / "outcomes.jsonl")] == [
        "dropped_solved",
        "kept",
    ] * 2 + ["dropped_solved"]


# ----- malformed records and attacks ---------------------------------------------------------------


def eval_file(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """An eval results file of the exact-answer toy env: one right answer, one wrong."""
    envs = EnvSet({"toy/ExactAnswer-v0": {}})
    rows = [
        {"id": "a", "prompt": "Say yes.", "answer": "yes"},
        {"id": "b", "prompt": "Say no.", "answer": "no"},
    ]
    out = tmp_path / "eval.jsonl"
    RolloutRunner(ScriptedPolicy("yes"), envs=envs, results_path=out).run(
        [("toy/ExactAnswer-v0", r) for r in rows]
    )
    envs.close()
    stored = read(out)
    assert [r["reward"] for r in stored] == [1.0, 0.0]
    return out, stored


def test_a_group_scored_env_is_rescored_a_whole_group_at_a_time(tmp_path):
    envs = EnvSet({"toy/LongestWins-v0": {}})
    lengths = iter([1, 3, 2] * 2)
    rows = [{"id": i, "prompt": f"Say something ({i}).", "answer": "-"} for i in "ab"]
    out = tmp_path / "eval.jsonl"
    runner = RolloutRunner(
        ScriptedPolicy(lambda m: "x" * next(lengths)), envs=envs, results_path=out, group_size=3
    )
    runner.run([("toy/LongestWins-v0", r) for r in rows])
    envs.close()
    stored = read(out)
    assert sorted(r["reward"] for r in stored) == [0.0] * 4 + [1.0] * 2
    stored[0]["reward_info"] = {**stored[0]["reward_info"], "masked": True, "error": "judge down"}
    out.write_text("".join(json.dumps(r) + "\n" for r in stored))
    summary = rescore(out, masked_only=True)
    assert changes(summary) == {"masked->scored": 1, "unchanged": 2, "skipped": 3}
    rescored = read(tmp_path / "eval.rescored.jsonl")
    group = stored[0]["group"]
    assert [("rescore" in r) for r in rescored] == [r["group"] == group for r in stored]
    assert [r["reward"] for r in rescored] == [r["reward"] for r in stored]


def test_malformed_records_get_an_error_each_and_the_run_goes_on(tmp_path, capsys):
    out, stored = eval_file(tmp_path)
    bad = [
        {k: v for k, v in stored[0].items() if k != "messages"},
        {**stored[0], "turns": "many"},
        {**stored[0], "env_id": "toy/NoSuchEnv-v0"},
        {**stored[0], "task_row": {"id": "a", "prompt": "Say yes."}},  # a row the env cannot load
        {**stored[0], "messages": stored[0]["messages"][:1]},  # no model turn left
        {**stored[0], "task_row": {"id": "a", "prompt": "Say maybe.", "answer": "yes"}},  # another prompt
    ]
    lines = [json.dumps(stored[0]), "{not json", *map(json.dumps, bad), json.dumps(stored[1])]
    out.write_text("\n".join(lines) + "\n")
    assert main(["rescore", str(out), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "7 row(s) could not be rescored" in captured.err
    rescored = read(tmp_path / "eval.rescored.jsonl")
    assert len(rescored) == 9
    assert [r["rescore"]["change"] for r in rescored] == ["unchanged"] + ["failed"] * 7 + ["unchanged"]
    errors = [r["rescore"]["error"] for r in rescored[1:8]]
    for error, expected in zip(errors, ["malformed record: not valid JSON", "KeyError: 'messages'", "invalid literal",
                                        "toy/NoSuchEnv-v0", "field 'answer'", "model turn", "prompt is not"],
                               strict=True):  # fmt: skip
        assert expected in error, error
    assert all(r["reward_info"]["masked"] and r["reward"] == 0.0 for r in rescored[1:8])


def test_a_stored_record_cannot_smuggle_a_reward(tmp_path):
    out, stored = eval_file(tmp_path)
    wrong = stored[1]
    forged = {**wrong, "reward": 1.0, "reward_info": {**wrong["reward_info"], "value": 1.0, "reason": None}}
    text = 'no", "reward": 1.0, "reward_info": {"value": 1.0, "masked": false}, "x": "'
    smuggled = json.loads(json.dumps(wrong).replace('"content": "yes"', f'"content": {json.dumps(text)}'))
    posing = {**wrong, "rescore": {"line": 3, "source": "0" * 16, "change": "unchanged"}}  # claims to be done
    out.write_text("".join(json.dumps(r) + "\n" for r in (forged, smuggled, posing)))
    summary = rescore(out, masked_only=False)
    rescored = read(tmp_path / "eval.rescored.jsonl")
    assert [r["reward"] for r in rescored] == [0.0, 0.0, 0.0]
    assert [r["rescore"]["change"] for r in rescored] == ["1->0", "unchanged", "unchanged"]
    assert rescored[2]["rescore"]["line"] == 3 and rescored[2]["rescore"]["source"] != "0" * 16
    assert changes(summary) == {"1->0": 1, "unchanged": 2}
    gym = {"responses_create_params": {"input": [{"role": "user", "content": "Say no."}]}, "answer": "no",
           "response": gym_response([message("yes")]), "reward": 1.0, "mask_sample": False,
           "reward_components": {"correct": 1}}  # fmt: skip
    (tmp_path / "gym.jsonl").write_text(json.dumps(gym) + "\n")
    assert changes(rescore(tmp_path / "gym.jsonl", env_id="toy/ExactAnswer-v0")) == {"1->0": 1}
    register("test/RowTrusting-v0", RowTrustingEnv)  # an env that would pay a verdict found in its row
    try:
        assert changes(
            rescore(tmp_path / "gym.jsonl", tmp_path / "trust.jsonl", env_id="test/RowTrusting-v0")
        ) == {"1->0": 1}
    finally:
        envs.unregister("test/RowTrusting-v0")


@dataclass(frozen=True)
class TrustingTask(ExactTask):
    trusted: float | None = None


class RowTrustingEnv(ExactAnswerEnv):
    """Pays whatever reward its task row names: a rollout's verdict must never reach it as a task field."""

    def load_task(self, row: dict[str, Any]) -> TrustingTask:
        task = super().load_task(row)
        components = row.get("reward_components")
        trusted = row.get("reward", components.get("correct") if isinstance(components, dict) else None)
        return TrustingTask(task.prompt, task.answer, trusted)

    async def ascore(self, task: Any, answer: str) -> Reward:
        return Reward(task.trusted) if task.trusted is not None else await super().ascore(task, answer)


def test_refusals_are_one_line(tmp_path, capsys):
    out, _ = eval_file(tmp_path)
    gym = tmp_path / "gym.jsonl"
    gym.write_text(
        json.dumps({"responses_create_params": {"input": "hi"}, "response": {"output": []}}) + "\n"
    )
    submit = tmp_path / "submit.jsonl"
    submit.write_text(json.dumps({"kind": "config", "strategy": "submit", "env": "cascade/Code-v0"}) + "\n")
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": 1}\n')
    cases = [
        ([str(gym)], "pass --env ID"),
        ([str(submit)], "submit` results cannot be rescored"),
        ([str(other)], "not a results file"),
        ([str(out), "-o", str(out)], "pass --in-place"),
    ]
    for argv, expected in cases:
        assert main(["rescore", *argv, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, err
    rescore(out, tmp_path / "a.jsonl")
    (tmp_path / "b.jsonl").write_text(out.read_text() + "\n")  # another file
    with pytest.raises(RescoreError, match="another file"):
        rescore(tmp_path / "b.jsonl", tmp_path / "a.jsonl")
    assert changes(rescore(tmp_path / "b.jsonl", tmp_path / "a.jsonl", force=True)) == {"unchanged": 2}
    summary = rescore(out, in_place=True)
    assert summary.out == out and all("rescore" in r for r in read(out))
    assert not (tmp_path / "eval.jsonl.rescoring").exists()
