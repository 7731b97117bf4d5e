"""The shipped laptop-scale pipeline (``cascade_demo``), end to end on a tiny model: 1 step per stage.

The long run (the embedded 135M model, several steps a stage, 24 held-out tasks per env) is a
benchmark (``cascade-envs train cascade_demo``, ``bench/bench_cascade.py``); this keeps every stage,
every eval env, the embedded judges, MOPD's auto teachers, the regression alarm and the report on
the real code path.
"""

from __future__ import annotations

import json

from cascade_envs.cli import main
from cascade_envs.trainer.cascade import find_config, load_pipeline

TINY = [
    "eval.limit=2",
    "eval.max_tokens=6",
    "train.steps=1",
    "rollout.group_size=2",
    "rollout.prompts_per_step=1",
    "rollout.max_tokens=6",
    "rollout.max_rounds=1",
]


def test_cascade_demo_runs_every_stage_evaluates_and_reports(tiny_model_dir, tmp_path, capsys):
    args = [
        "train",
        "cascade_demo",
        "--set",
        f"model.path={tiny_model_dir}",
        "--set",
        f"output_dir={tmp_path}",
    ]
    assert main([*args, *[a for s in TINY for a in ("--set", s)]]) == 0
    state = json.loads((tmp_path / "cascade_state.json").read_text())
    # every stage of the file trained, in its order (test_stage_configs pins the order to RECIPE.md's)
    assert list(state["stages"]) == [s.name for s in load_pipeline(find_config("cascade_demo")).stages]
    assert len(state["stages"]) == 8
    assert all(record["steps"] == 1 for record in state["stages"].values())
    assert all("regressions" in record for record in state["stages"].values())
    teachers = state["stages"]["mopd"]["teachers"]
    assert set(teachers) == {
        "cascade/InstructionFollowing-v0",
        "cascade/MCQA-v0",
        "cascade/StructuredOutput-v0",
        "cascade/Math-v0",
    } and {t["rule"] for t in teachers.values()} == {"auto"}
    report = json.loads((tmp_path / "eval.json").read_text())
    assert len(report["rows"]) == 9 and all(
        set(row["results"]) == set(report["envs"]) for row in report["rows"]
    )  # every checkpoint on every eval env
    assert (tmp_path / "eval.png").stat().st_size > 0
    out = capsys.readouterr().out
    assert "held-out scores" in out and "rlhf_teacher (branch)" in out


def test_cascade_demo_trains_each_domain_on_rows_its_evaluation_never_sees():
    import yaml

    data = yaml.safe_load(find_config("cascade_demo").read_text())
    evaluated = {kwargs["tasks"] for kwargs in data["eval"]["envs"].values()}
    trained = " ".join(" ".join(stage.get("set", [])) for stage in data["stages"])
    assert all(path.endswith("/easy_heldout.jsonl") and path not in trained for path in evaluated)
