"""SolveJob and `cascade-envs solve`: the results JSONL, resuming after an interruption or a spent budget,
refusing other arguments, the summary, a budget of 0, and the CLI against a real chat server."""

from __future__ import annotations

import asyncio
import json

import pytest

from cascade_envs.cli import main
from cascade_envs.env import run_sync
from cascade_envs.envs.math.env import MathEnv
from cascade_envs.testing import ScriptedPolicy
from cascade_envs.tts import Budget
from cascade_envs.tts.run import SolveError, SolveJob
from tests.chat_server import ScriptedChatServer, Step

from .helpers import context, math_row

ROWS = [math_row(0, "2"), math_row(1, "3"), math_row(2, "4")]
CONFIG = {"env": "cascade/Math-v0", "settings": {"candidates": 2}, "policy": "scripted"}


class Interrupt(BaseException):
    """Stands for a kill in the middle of a task."""


def gold(messages) -> str:
    return "234"[int(messages[-1]["content"].split("Problem ")[1][0])]


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def env():
    env = MathEnv(ROWS, workers=1)
    yield env
    run_sync(env.aclose())


def test_a_run_resumed_after_an_interruption_does_not_redo_finished_tasks(env, tmp_path):
    path = tmp_path / "results.jsonl"

    def interrupted(messages):
        if "Problem 1" in messages[-1]["content"] and messages[-1]["content"].startswith("Check"):
            raise Interrupt  # task 1 answered (a line written), killed while verifying
        return (
            "VERDICT: ACCEPT"
            if messages[-1]["content"].startswith("Check")
            else f"\\boxed{{{gold(messages)}}}"
        )

    job = SolveJob("refine", list(env.tasks), path, CONFIG).open()
    ctx, _ = context(env, ScriptedPolicy(interrupted), "refine", rounds=2)
    with pytest.raises(Interrupt):
        asyncio.run(job.arun(ctx, concurrency=1))
    kinds = [(r["kind"], r.get("task_id"), r.get("role")) for r in lines(path)]
    assert kinds == [("config", None, None), ("attempt", "m0", "candidate"), ("attempt", "m0", "verifier"),
                     ("outcome", "m0", None), ("attempt", "m1", "candidate")]  # fmt: skip
    with path.open("a") as fh:
        fh.write('{"kind": "attempt", "task_id": "m1", "ind')  # a line the kill cut short

    resumed = SolveJob("refine", list(env.tasks), path, CONFIG).open()
    assert [t.task_id for _, t in resumed.pending] == ["m1", "m2"]
    policy = ScriptedPolicy(
        lambda m: "VERDICT: ACCEPT" if m[-1]["content"].startswith("Check") else f"\\boxed{{{gold(m)}}}"
    )
    ctx, _ = context(env, policy, "refine", rounds=2)
    summary = asyncio.run(resumed.arun(ctx, concurrency=2))
    assert len(policy.calls) == 4 and all("Problem 0" not in c.messages[-1]["content"] for c in policy.calls)
    rows = lines(path)
    assert sorted(r["task_id"] for r in rows if r["kind"] == "outcome") == ["m0", "m1", "m2"]
    assert sum(r["kind"] == "attempt" and r["task_id"] == "m1" for r in rows) == 2  # the partial line is gone
    d = summary.to_dict()
    assert (
        d["tasks"] == 3 and d["selected_score"] == 1.0 and d["solved_this_run"] == 2 and d["generations"] == 6
    )
    again = SolveJob("refine", list(env.tasks), path, CONFIG).open()
    assert again.pending == [] and again.summary().to_dict()["tasks"] == 3


def test_a_task_cut_short_by_the_budget_is_solved_again_on_resume(env, tmp_path):
    path = tmp_path / "results.jsonl"
    policy = ScriptedPolicy(lambda m: f"\\boxed{{{gold(m)}}}")
    job = SolveJob("best_of_n", list(env.tasks), path, CONFIG).open()
    ctx, _ = context(
        env, policy, "best_of_n", candidates=2, selector="majority", budget=Budget(max_generations=3)
    )
    summary = asyncio.run(job.arun(ctx, concurrency=1))
    d = summary.to_dict()
    assert d["tasks"] == 1 and d["not_started"] == 2 and d["budget"] == "generation budget spent (3 of 3)"
    assert "2 task(s) not finished; rerun to continue" in summary.text()
    cut = [r for r in lines(path) if r["kind"] == "outcome" and r["cut_short"]]
    assert [r["task_id"] for r in cut] == ["m1"]
    resumed = SolveJob("best_of_n", list(env.tasks), path, CONFIG).open()
    assert [t.task_id for _, t in resumed.pending] == ["m1", "m2"]
    ctx, _ = context(env, policy, "best_of_n", candidates=2, selector="majority")
    assert asyncio.run(resumed.arun(ctx)).to_dict()["pass_at_n"] == 1.0
    assert [r["task_id"] for r in lines(path) if r["kind"] == "outcome" and r["task_id"] == "m1"] == ["m1"]


def test_a_results_file_of_other_arguments_is_refused_unless_forced(env, tmp_path):
    path = tmp_path / "results.jsonl"
    SolveJob("best_of_n", list(env.tasks), path, CONFIG).open()
    with pytest.raises(
        SolveError, match=r"other arguments \(settings: \{'candidates': 2\} -> \{'candidates': 8\}\)"
    ):
        SolveJob("best_of_n", list(env.tasks), path, {**CONFIG, "settings": {"candidates": 8}}).open()
    with pytest.raises(SolveError, match="strategy: 'best_of_n' -> 'refine'"):
        SolveJob("refine", list(env.tasks), path, CONFIG).open()
    assert SolveJob("refine", list(env.tasks), path, CONFIG).open(force=True).pending
    (tmp_path / "other.jsonl").write_text('{"row": 1}\n')
    with pytest.raises(SolveError, match="not a results file"):
        SolveJob("refine", list(env.tasks), tmp_path / "other.jsonl", CONFIG).open()


def test_cli_refuses_a_generation_budget_of_zero_with_a_clear_message(capsys):
    code = main(["solve", "--env", "cascade/Math-v0", "--strategy", "best_of_n", "--max-generations", "0"])
    assert code == 2
    assert "--max-generations 0 leaves no model call to make: nothing to solve" in capsys.readouterr().err
    assert main(["solve", "--env", "cascade/Math-v0", "--strategy", "nope", "-o", "/dev/null/x"]) == 2


def test_cli_solves_against_a_chat_server_prints_the_summary_and_resumes(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "out.jsonl"

    def step(request):
        text = request["messages"][-1]["content"]
        if text.startswith("Check"):
            return Step("VERDICT: REJECT" if "\\boxed{9}" in text else "VERDICT: ACCEPT")
        if "previous attempt" in text:
            return Step(f"fixed: \\boxed{{{gold(request['messages'])}}}")
        return Step("\\boxed{9}" if "Problem 2" in text else f"\\boxed{{{gold(request['messages'])}}}")

    argv = ["solve", "--env", "cascade/Math-v0", "--tasks", str(tasks), "--strategy", "refine", "--rounds", "3",
            "--max-tokens", "32", "--no-progress", "-o", str(out), "--request-timeout", "30"]  # fmt: skip
    with ScriptedChatServer(step, models=("m",)) as server:
        assert main([*argv, "--policy", server.url]) == 0
        first = capsys.readouterr().out
        assert len(server.requests) == 8  # 2 tasks x (answer, verify) + task 2: answer, reject, fix, accept
        assert main([*argv, "--policy", server.url]) == 0  # resumed: nothing pending, no request
        assert len(server.requests) == 8
    assert "tasks 3: selected score 1.000 over 3 scored, pass@N 1.000, selector accuracy 1.000" in first
    assert "generations 8, rounds 4" in first and f"results: {out}" in first
    assert "tasks 3: selected score 1.000" in capsys.readouterr().out
    roles = [
        (r["task_id"], r["round"], r["role"], r["verdict"])
        for r in lines(out)
        if r["kind"] == "attempt" and r["task_id"] == "m2"
    ]
    assert roles == [("m2", 1, "candidate", None), ("m2", 1, "verifier", "reject"),
                     ("m2", 2, "refiner", None), ("m2", 2, "verifier", "accept")]  # fmt: skip


def test_multi_turn_and_group_scored_envs_are_refused_with_a_reason(tmp_path, capsys):
    argv = [
        "solve",
        "--strategy",
        "best_of_n",
        "--policy",
        "http://127.0.0.1:9/v1",
        "--no-progress",
        "--limit",
        "1",
    ]
    assert main([*argv, "--env", "cascade/Workplace-v0", "-o", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "best_of_n needs a single-turn env scored per answer; cascade/Workplace-v0 plays" in err


def test_a_task_past_its_time_limit_is_masked_with_the_reason(env, tmp_path):
    path = tmp_path / "results.jsonl"
    job = SolveJob("best_of_n", list(env.tasks)[:1], path, CONFIG).open()
    ctx, _ = context(env, ScriptedPolicy("\\boxed{2}", delay_s=5.0), "best_of_n", candidates=1)
    summary = asyncio.run(job.arun(ctx, task_timeout_s=0.2)).to_dict()
    assert summary["masked"] == 1 and summary["selected_score"] is None
    assert summary["masked_reasons"] == {"the task took more than 0.2 s (--episode-timeout)": 1}
    assert SolveJob("best_of_n", list(env.tasks)[:1], path, CONFIG).open().pending == []
