"""``bench/bench_cascade.py`` on a tiny model (1 step a stage): three arms, one table, the regressions
and MOPD's recovery; and those two computed from scripted scores."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import bench_cascade  # noqa: E402

from cascade_envs.trainer.cascade_report import EvalRow  # noqa: E402

TINY = ["eval.limit=2", "eval.max_tokens=6", "train.steps=1", "rollout.group_size=2",
        "rollout.prompts_per_step=1", "rollout.max_tokens=6", "rollout.max_rounds=1"]  # fmt: skip


def test_three_arms_share_the_prefix_and_print_one_table(tmp_path, monkeypatch, capsys):
    from tests.trainer.toys import save_tiny

    model = save_tiny(tmp_path / "model")
    sets = [a for s in [f"model.path={model}", *TINY] for a in ("--set", s)]
    out, report = tmp_path / "out", tmp_path / "bench.json"
    argv = ["bench_cascade.py", "--seeds", "0", "--out", str(out), "--plot", str(tmp_path / "b.png")]
    monkeypatch.setattr(sys, "argv", [*argv, "--json", str(report), *sets])
    bench_cascade.main()
    arms = json.loads(report.read_text())["arms"]
    assert set(arms) == {"cascade", "joint", "no_mopd"}
    assert arms["joint"]["0"]["stages"] == ["start", "joint"]
    assert arms["no_mopd"]["0"]["stages"][:4] == [
        "start",
        "if_rl",
        "multi_domain_rl",
        "rlhf_teacher (branch)",
    ]
    assert arms["no_mopd"]["0"]["stages"][4] == "mopd-no-mopd"
    state = json.loads((out / "seed0" / "cascade_state.json").read_text())
    assert state["stages"]["if_rl"]["steps"] == 1 and "joint" in state["stages"]  # one folder, shared
    assert {m["env"] for m in arms["cascade"]["0"]["mopd"]} <= set(state["stages"]["mopd"]["teachers"])
    assert (tmp_path / "b.png").stat().st_size > 0 and (out / "seed0" / "cascade_eval.png").exists()
    printed = capsys.readouterr().out
    assert "held-out scores of each arm" in printed and printed.count("mean") >= 3


def test_regressions_and_mopd_recovery_from_scores():
    def row(label, a, parent=None):
        return EvalRow(label, {"A": {"mean": a, "scored": 4}}, parent)

    rows = [
        row("start", 0.5),
        row("s1", 0.75, 0),
        row("s2", 0.25, 1),
        row("mopd", 0.625, 2),
        row("s3", 0.5, 3),
    ]
    expected = [("s2", "A", -0.5), ("mopd", "A", -0.125), ("s3", "A", -0.25)]  # each vs the best so far
    assert bench_cascade.cascade_regressions(rows, ["A"]) == expected
    state = {"stages": {"mopd": {"teachers": {"A": {"from": "s1", "score": 0.75}}}}}
    (m,) = bench_cascade.mopd_recovery(rows, state, ["A"])
    assert (m["before"], m["after"], m["best_before"], m["regression"], m["recovered"]) == (
        0.25,
        0.625,
        0.75,
        0.5,
        0.375,
    )
    assert m["teacher"] == "s1" and m["teacher_score"] == 0.75
