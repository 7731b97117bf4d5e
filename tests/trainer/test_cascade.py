"""The Cascade RL pipeline: stage chaining, branches, evaluation, MOPD teacher choice, resume, errors.

The bookkeeping runs on the ``trainer=``/``evaluator=`` seams with stand-ins that train and score
nothing; the command-line tests at the end run the real trainer and evaluation (0 steps, and a stage
stopped and resumed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cascade_envs.cli import main
from cascade_envs.trainer.cascade import load_pipeline
from cascade_envs.trainer.cascade_report import EvalRow, eval_table, regressions
from cascade_envs.trainer.cascade_run import STATE_FILE, CascadeRunner, PipelineState, StageResult
from cascade_envs.trainer.config import ConfigError
from cascade_envs.trainer.evaluation import EvalSettings, evaluate_checkpoint
from cascade_envs.trainer.stopping import STOP_FILE_ENV, STOPPED_EXIT_CODE
from cascade_envs.trainer.teachers import Candidate, choose_teachers

ENV = "test/SayYes-v0"
EVERY_STAGE = [
    "rollout.group_size=4",
    "rollout.prompts_per_step=2",
    "rollout.max_tokens=4",
    "optim.lr=3e-3",
    "train.steps=1",
    "train.save_every=1",
    "train.keep_checkpoints=1",
    "train.tensorboard=false",
    "train.progress=false",
    "train.plot=false",
]


@pytest.fixture
def pipeline_file(tiny_model_dir, tmp_path) -> Path:
    """if_rl-like stage a, a branch b from the start model, then MOPD c with an auto teacher."""
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump({"name": "g", "mix": {"envs": {ENV: 1.0}}}))
    (tmp_path / "mopd.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "m",
                "algorithm": "mopd",
                "mix": {"envs": {ENV: 1.0}},
                "mopd": {"teachers": {ENV: "auto"}},
                "rollout": {"dynamic_filtering": False, "max_rounds": 1},
            }
        )
    )
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "model": {"path": str(tiny_model_dir)},
                "output_dir": str(tmp_path / "out"),
                "eval": {"max_tokens": 4, "limit": 3, "envs": {ENV: None}},
                "set": EVERY_STAGE,
                "stages": [
                    {"name": "a", "config": "grpo.yaml", "set": ["train.steps=2"]},
                    {"name": "b", "config": "grpo.yaml", "init": "start", "chain": False},
                    {"name": "c", "config": "mopd.yaml"},
                ],
            }
        )
    )
    return path


class Recorder:
    """Stands in for training and evaluation and records every call. Training writes an empty model
    folder where the trainer's last checkpoint would be; evaluation scores each checkpoint with the
    scripted mean of its stage (``start`` for the start model), 0.0 when none is scripted."""

    def __init__(self, scores: dict[str, float] | None = None, fail_on: str | None = None):
        self.trained: list[Any] = []
        self.evaluated: list[str] = []
        self.scores = scores or {}
        self.fail_on = fail_on

    def train(self, config: Any, label: str) -> StageResult:
        self.trained.append(config)
        out = Path(config.train.output_dir)
        if self.fail_on and out.name == self.fail_on:
            raise RuntimeError("killed")
        steps = config.train.steps
        if not steps:
            return StageResult(None, 0, 0)
        checkpoint = out / "checkpoints" / f"step_{steps:06d}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "config.json").write_text("{}")
        return StageResult(str(checkpoint), steps, 0)

    def evaluate(self, path: str, model: Any, settings: EvalSettings, env_ids: list[str]) -> dict[str, Any]:
        self.evaluated.append(path)
        label = "start" if "checkpoints" not in path else Path(path).parents[1].name
        return {
            env_id: {
                "mean": self.scores.get(label, 0.0),
                "questions": settings.limit,
                "masked": 0,
                "key": settings.key(env_id),
            }
            for env_id in env_ids
        }


def run(
    path: Path, rec: Recorder, overrides: list[str] | None = None, from_stage: str | None = None
) -> PipelineState:
    pipeline = load_pipeline(path, overrides or [])
    return CascadeRunner(pipeline, from_stage=from_stage, trainer=rec.train, evaluator=rec.evaluate).run()


def test_pipeline_chains_branches_evaluates_and_picks_teachers(
    pipeline_file, tiny_model_dir, tmp_path, capsys
):
    rec = Recorder(scores={"start": 0.2, "a": 0.5, "b": 0.9})
    state = run(pipeline_file, rec)
    out = tmp_path / "out"
    a, b, c = (state.stages[n] for n in "abc")
    assert [cfg.model.path for cfg in rec.trained] == [str(tiny_model_dir), str(tiny_model_dir), a.checkpoint]
    assert a.checkpoint.endswith("a/checkpoints/step_000002") and a.steps == 2
    assert c.init == a.checkpoint != b.checkpoint  # the branch b does not feed forward
    assert [cfg.train.output_dir for cfg in rec.trained] == [str(out / n) for n in "abc"]
    assert all(cfg.train.resume for cfg in rec.trained)
    mopd = rec.trained[2]
    assert mopd.algorithm == "mopd" and mopd.mopd.teachers == {ENV: b.checkpoint}  # best score: the branch
    assert c.teachers[ENV]["from"] == "b" and c.teachers[ENV]["scores"]["b"] == 0.9
    assert len(rec.evaluated) == 4  # start + every stage
    saved = json.loads((out / "eval.json").read_text())
    assert [r["stage"] for r in saved["rows"]] == ["start", "a", "b (branch)", "c"]
    assert saved["rows"][1]["results"][ENV]["questions"] == 3
    assert saved["teachers"]["c"][ENV]["from"] == "b"
    assert (out / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr()
    assert "c: MOPD teachers: test/SayYes-v0 <- b (0.900" in printed.err
    assert "0.500 +0.300" in printed.out and "b (branch)" in printed.out
    assert "steps with a learning signal: a 2/2, b 1/1, c 1/1" in printed.out


def test_resume_skips_finished_stages_and_from_stage_redoes_the_rest(pipeline_file, tmp_path, capsys):
    crashed = Recorder(fail_on="b")
    with pytest.raises(RuntimeError, match="killed"):
        run(pipeline_file, crashed)
    state = json.loads((tmp_path / "out" / STATE_FILE).read_text())
    assert list(state["stages"]) == ["a"] and state["stages"]["a"]["config_hash"]

    rec = Recorder()
    state = run(pipeline_file, rec)  # the same command again: a is skipped, b and c train
    assert [Path(cfg.train.output_dir).name for cfg in rec.trained] == ["b", "c"]
    assert "a: finished earlier" in capsys.readouterr().err

    again = Recorder()
    assert run(pipeline_file, again) == state and not again.trained and not again.evaluated

    redo = Recorder()
    run(pipeline_file, redo, from_stage="b")
    assert [Path(cfg.train.output_dir).name for cfg in redo.trained] == ["b", "c"]
    assert sorted(p.name.split(".")[0] for p in (tmp_path / "out").glob("*.replaced-*")) == ["b", "c"]

    with pytest.raises(ConfigError, match=r"stage a finished with another config .* --from-stage a"):
        run(pipeline_file, Recorder(), ["a:optim.lr=1e-3"])


def test_a_state_file_that_is_not_one_is_refused(pipeline_file, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / STATE_FILE).write_text(json.dumps({"name": "t", "stages": {"a": {"steps": 2}}}))
    with pytest.raises(
        ConfigError, match=r"not a cascade state file \(stages\.a: missing key\(s\) checkpoint\)"
    ):
        run(pipeline_file, Recorder())


def test_bad_stage_config_fails_before_any_training(pipeline_file, tmp_path):
    rec = Recorder()
    with pytest.raises(ConfigError, match=r"stage c \(config mopd.yaml\): unknown config key 'optim.lrr'"):
        run(pipeline_file, rec, ["c:optim.lrr=1"])
    with pytest.raises(ConfigError, match=r"stage b: model\.path is set by the pipeline"):
        run(pipeline_file, rec, ["b:model.path=/x"])
    assert not rec.trained and not rec.evaluated and not (tmp_path / "out").exists()

    data = yaml.safe_load(pipeline_file.read_text())
    data["eval"]["envs"] = {"test/Constant-v0": None}
    pipeline_file.write_text(yaml.safe_dump(data))
    with pytest.raises(
        ConfigError,
        match=r"mopd.teachers.test/SayYes-v0 is auto, but test/SayYes-v0 is not evaluated: "
        "add it to eval.envs",
    ):
        run(pipeline_file, rec)
    data["stages"][0]["confg"] = "x"
    pipeline_file.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"unknown config key 'stages\[0\].confg'; did you mean 'config'"):
        run(pipeline_file, rec)
    data["stages"][0].pop("confg")
    data["stages"][1]["init"] = "c"
    pipeline_file.write_text(yaml.safe_dump(data))
    with pytest.raises(
        ConfigError, match=r"stages\[1\].init 'c' must be previous, start or an earlier stage"
    ):
        run(pipeline_file, rec)
    assert not rec.trained


def test_teacher_choice_by_score_ties_to_the_later_and_named_refs():
    candidates = [
        Candidate("start", "/s", {"m": {"mean": 0.5}, "x": {"mean": None}}),
        Candidate("a", "/a", {"m": {"mean": 0.25}}),
        Candidate("b", "/b", {"m": {"mean": 0.5}}),
    ]
    teachers, choices = choose_teachers(
        "mopd", {"m": "auto", "n": "start", "p": "/folder"}, candidates, ["m", "x"]
    )
    assert teachers == {"m": "/b", "n": "/s", "p": "/folder"}
    assert choices["m"]["scores"] == {"start": 0.5, "a": 0.25, "b": 0.5}
    with pytest.raises(ConfigError, match="no checkpoint has a score on x"):
        choose_teachers("mopd", {"x": "auto"}, candidates, ["m", "x"])
    with pytest.raises(
        ConfigError, match=r"mopd\.teachers\.m names stage 'later', which does not run before it"
    ):
        choose_teachers("mopd", {"m": "later"}, candidates, ["m"], stages=["a", "b", "mopd", "later"])


def test_eval_table_marks_changes_vs_the_parent_and_masked_answers():
    rows = [
        EvalRow("start", {"e/A-v0": {"mean": 0.5, "masked": 0}, "e/B-v0": {"mean": None, "masked": 4}}),
        EvalRow("s1", {"e/A-v0": {"mean": 0.75, "masked": 1}, "e/B-v0": {"mean": 0.25, "masked": 0}}, 0),
        EvalRow("s2", {"e/A-v0": {"mean": 0.25, "masked": 0}}, 0, branch=True),
        EvalRow("s3", {"e/A-v0": {"mean": 0.75, "masked": 0}}, 1),
    ]
    rows[2].regressions = regressions(rows, 2, ["e/A-v0", "e/B-v0"], 0.05)
    lines = eval_table(rows, ["e/A-v0", "e/B-v0"]).splitlines()
    assert lines[0].split() == ["stage", "A", "B"]
    assert "0.500" in lines[1] and "masked" in lines[1]
    assert "0.750 +0.250 [1 masked]" in lines[2] and "0.250" in lines[2] and "+" not in lines[2].split("]")[1]
    assert "0.250 -0.250 !" in lines[3]  # vs start, where the branch began; 0.5 below s1's best
    assert "0.750 =" in lines[4] and lines[4].rstrip().endswith("n/a")  # vs s1, not the branch above


def test_regression_alarm_compares_with_the_best_earlier_checkpoint():
    rows = [
        EvalRow("start", {"A": {"mean": 0.5}, "B": {"mean": 0.5}}),
        EvalRow("s1", {"A": {"mean": 0.75}, "B": {"mean": 0.5}}, 0),
        EvalRow("s2", {"A": {"mean": 0.5}, "B": {"mean": 0.46}, "C": {"mean": 0.0}}, 1),
    ]
    assert regressions(rows, 2, ["A", "B", "C"], 0.05) == {
        "A": {"score": 0.5, "best": 0.75, "best_at": "s1", "drop": 0.25}
    }  # B fell 0.04 (inside the margin); C has no earlier score
    assert regressions(rows, 2, ["A", "B"], 0.0)["B"]["drop"] == pytest.approx(0.04)
    assert regressions(rows, 2, ["A"], 0.25) == {}  # exactly the margin is not more than it
    assert regressions(rows, 0, ["A"], 0.0) == {}
    rows[2].scores["A"] = {"mean": 0.0, "scored": 3, "masked": 4}  # a judge that failed on most answers
    assert regressions(rows, 2, ["A"], 0.05) == {}


def test_pipeline_flags_regressions_in_the_state_and_the_table(pipeline_file, capsys):
    rec = Recorder({"start": 0.5, "a": 0.75, "b": 0.25, "c": 0.625})
    state = run(pipeline_file, rec, ["eval.regression_margin=0.1"])
    alarm = {ENV: {"score": 0.625, "best": 0.75, "best_at": "a", "drop": 0.125}}
    assert state.stages["a"].regressions == {} and state.stages["c"].regressions == alarm
    assert state.stages["b"].regressions == {}  # a branch (0.25) trains a teacher aside: no alarm
    saved = json.loads((Path(load_pipeline(pipeline_file).output_dir) / STATE_FILE).read_text())
    assert saved["stages"]["c"]["regressions"] == alarm
    out, err = capsys.readouterr()
    assert (
        "regression alarm: after c, SayYes 0.625 is 0.125 below its best (a 0.750" in err
    )  # when it happens
    assert "regression alarm: after c" in out and "0.625 -0.125 !" in out  # and in the final table
    rows = json.loads((Path(load_pipeline(pipeline_file).output_dir) / "eval.json").read_text())["rows"]
    assert [r["started_from"] for r in rows] == [None, "start", "start", "a"]
    assert (
        state.stages["c"].regressions
        == run(pipeline_file, rec, ["eval.regression_margin=0.1"]).stages["c"].regressions
    )  # a resumed run keeps them
    assert run(pipeline_file, rec, ["eval.regression_margin=0.2"]).stages["c"].regressions == {}


def test_cli_train_names_pipelines_and_errors(pipeline_file, tiny_model_dir, tmp_path, capsys):
    assert main(["train", "no_such_config"]) == 2
    err = capsys.readouterr().err
    assert "'no_such_config': no such file, and no shipped config" in err and "cascade_demo" in err
    assert main(["train", str(pipeline_file), "--from-stage", "zzz"]) == 2
    assert "no stage named 'zzz'" in capsys.readouterr().err
    assert main(["train", str(tmp_path / "grpo.yaml"), "--from-stage", "a"]) == 2
    assert "--from-stage applies to a pipeline file" in capsys.readouterr().err
    assert main(["train", str(pipeline_file), "--set", "stages=[]"]) == 2
    assert "edit the pipeline file" in capsys.readouterr().err


def test_cli_runs_a_pipeline_file_and_resumes(pipeline_file, tmp_path, capsys):
    args = ["train", str(pipeline_file), "--set", "train.steps=0", "--set", "eval.limit=2"]
    assert main(args) == 0
    out = tmp_path / "out"
    state = json.loads((out / STATE_FILE).read_text())
    assert list(state["stages"]) == ["a", "b", "c"]
    assert all(s["checkpoint"] == state["start"]["checkpoint"] for s in state["stages"].values())  # 0 steps
    printed = capsys.readouterr()
    assert "no checkpoint was written (0 steps)" in printed.err and "start" in printed.out
    assert [r["results"][ENV]["questions"] for r in json.loads((out / "eval.json").read_text())["rows"]] == [
        2
    ] * 4
    assert main(args) == 0 and "c: finished earlier" in capsys.readouterr().err


def test_a_stopped_pipeline_resumes_inside_its_stage(pipeline_file, tmp_path, capsys, monkeypatch):
    """SIGTERM's stop request (here its stop file) stops stage a after its first step with a checkpoint;
    the same command then resumes a at that step instead of redoing it, and goes on."""
    stop_file = tmp_path / "stop"
    stop_file.touch()
    monkeypatch.setenv(STOP_FILE_ENV, str(stop_file))
    args = ["train", str(pipeline_file), "--set", "eval.limit=1", "--set", "a:train.save_every=5"]
    assert main(args) == STOPPED_EXIT_CODE
    out = tmp_path / "out"
    assert "stopped by SIGTERM after step 1 of 2" in capsys.readouterr().err
    assert not json.loads((out / STATE_FILE).read_text())["stages"]  # a is not finished
    assert (out / "a" / "checkpoints" / "step_000001").is_dir()
    stop_file.unlink()
    assert main(args) == 0
    assert "resumed from step 1" in capsys.readouterr().err
    assert [json.loads(line)["step"] for line in (out / "a" / "metrics.jsonl").read_text().splitlines()] == [
        1,
        2,
    ]
    assert list(json.loads((out / STATE_FILE).read_text())["stages"]) == ["a", "b", "c"]


def test_evaluation_scores_every_env_on_its_own_tasks(tiny_model_dir, monkeypatch):
    from cascade_envs.judges import JUDGE_URL_ENV, JudgeUnavailable
    from cascade_envs.trainer.config import ModelConfig

    settings = EvalSettings(
        envs={ENV: None, "test/HalfBroken-v0": {}},
        max_tokens=5,
        limit=3,
        group_sizes={"test/HalfBroken-v0": 2},
    )
    results = evaluate_checkpoint(str(tiny_model_dir), ModelConfig(), settings)
    assert (results[ENV]["questions"], results[ENV]["answers"], results[ENV]["errors"]) == (3, 3, 0)
    assert (results["test/HalfBroken-v0"]["questions"], results["test/HalfBroken-v0"]["answers"]) == (3, 6)
    assert results[ENV]["key"] != results["test/HalfBroken-v0"]["key"]
    monkeypatch.delenv(JUDGE_URL_ENV, raising=False)
    with pytest.raises(JudgeUnavailable):  # an env that cannot be made stops the evaluation at once
        evaluate_checkpoint(str(tiny_model_dir), ModelConfig(), EvalSettings(envs={"cascade/GenRM-v0": {}}))


def test_masked_answers_are_counted_apart_never_as_zero():
    from cascade_envs.core import Reward
    from cascade_envs.rollout.runner import EpisodeResult, GroupResult
    from cascade_envs.trainer.evaluation import _summary

    def episode(reward: Reward) -> EpisodeResult:
        return EpisodeResult("e/A-v0", "t", 0, 0, [], [], reward)

    groups = [
        GroupResult("e/A-v0", "t", {}, [episode(Reward(1.0)), episode(Reward.failed("judge down"))]),
        GroupResult("e/A-v0", "u", {}, [episode(Reward(0.5)), episode(Reward.failed("judge down"))]),
    ]
    summary = _summary("e/A-v0", groups, 2)
    assert (summary["mean"], summary["scored"], summary["masked"]) == (0.75, 2, 2)
    assert summary["mask_reasons"] == {"judge down": 2}
    only_masked = _summary("e/A-v0", [GroupResult("e/A-v0", "t", {}, [episode(Reward.failed("x"))])], 1)
    assert only_masked["mean"] is None and only_masked["masked"] == 1


def test_control_arms_share_the_cascade_prefix_and_its_steps(pipeline_file, tmp_path):
    from cascade_envs.trainer.cascade_arms import joint, no_mopd

    rec = Recorder()
    run(pipeline_file, rec)
    pipeline = load_pipeline(pipeline_file)
    arm = no_mopd(pipeline)
    assert [(s["name"], s.get("init", "previous")) for s in arm["stages"]] == [
        ("a", "previous"),
        ("b", "start"),
        ("c-no-mopd", "previous"),
    ]
    assert arm["stages"][2]["set"][-1] == "algorithm=grpo"
    path = tmp_path / "no_mopd.yaml"
    path.write_text(yaml.safe_dump(arm))
    trained = len(rec.trained)
    state = run(path, rec)  # same output_dir: a and b are the cascade's own, only c is retrained as GRPO
    assert [Path(c.train.output_dir).name for c in rec.trained[trained:]] == ["c-no-mopd"]
    assert rec.trained[-1].algorithm == "grpo" and not state.stages["c-no-mopd"].teachers
    together = joint(pipeline)
    (stage,) = together["stages"]
    assert stage["name"] == "joint" and "train.steps=3" in stage["set"]  # a's 2 + c's 1; branch b left out
    path.write_text(yaml.safe_dump(together))
    run(path, rec)
    assert rec.trained[-1].train.steps == 3 and list(rec.trained[-1].mix_weights()[0]) == [ENV]
    with pytest.raises(ValueError, match="no MOPD stage"):
        no_mopd(load_pipeline(path))
