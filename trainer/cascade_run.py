"""Running a Cascade RL pipeline: check every stage, train them in order, evaluate, resume.

``output_dir/cascade_state.json`` records the start model's evaluation and each finished stage
(``PipelineState``: checkpoint, config hash, steps, evaluation, teachers, times). Rerunning the same
command skips finished stages and continues an unfinished one from its own checkpoints (the trainer
resumes from its ``output_dir``). ``from_stage`` forgets that stage and every later one and moves
their folders aside (``<name>.replaced-<time>``), so they are trained again. A finished stage whose
config changed since (another hash) is refused with a one-line hint (redo it with ``--from-stage``),
never silently reused or retrained. Stored scores whose eval settings changed are recomputed from
the checkpoint.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .cascade import (
    PREVIOUS,
    START,
    Pipeline,
    StageSpec,
    build_stage_config,
    config_hash,
    load_pipeline,
    stage_data,
    stage_teachers,
    with_teachers,
)
from .cascade_report import EvalRow, Scores, alarm_lines, eval_table, plot_cascade, regressions, stage_rewards
from .config import Config, ConfigError, ModelConfig
from .evaluation import EvalSettings, evaluate_checkpoint
from .run import run_training
from .teachers import Candidate, choose_teachers, teacher_line
from .typed_yaml import build

STATE_FILE = "cascade_state.json"
EVAL_FILE = "eval.json"
PLOT_FILE = "eval.png"


@dataclass
class CheckpointRecord:
    """A checkpoint of the pipeline and its evaluation: the start model, or a finished stage."""

    checkpoint: str
    eval: Scores = field(default_factory=dict)


@dataclass
class StageRecord(CheckpointRecord):
    """A finished stage: what it trained (config, hash, init), what it left, and its teachers."""

    config: str = ""
    config_hash: str = ""
    init: str = ""
    chain: bool = True
    steps: int = 0
    steps_with_signal: int = 0
    teachers: dict[str, Any] = field(default_factory=dict)
    regressions: dict[str, Any] = field(default_factory=dict)
    """The regression alarm after this stage: ``{env_id: {score, best, best_at, drop}}`` (``cascade_report``)."""
    train_s: float = 0.0
    finished_at: str = ""


@dataclass
class PipelineState:
    """``cascade_state.json``: the start model's record and each finished stage's, by name."""

    name: str = ""
    start: CheckpointRecord | None = None
    stages: dict[str, StageRecord] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def candidates(self, order: list[str]) -> list[Candidate]:
        """The checkpoints a teacher can be chosen from: the start model, then the finished stages of ``order``."""
        found = [Candidate(START, self.start.checkpoint, self.start.eval)] if self.start else []
        return found + [
            Candidate(n, self.stages[n].checkpoint, self.stages[n].eval) for n in order if n in self.stages
        ]


@dataclass
class StageResult:
    """What training one stage left: its last checkpoint (``None``: no step was saved) and step counts."""

    checkpoint: str | None
    steps: int
    skipped: int


def train_stage(config: Config, label: str) -> StageResult:
    """Train one stage's ``Config`` with the trainer, as ``cascade-envs train`` does."""
    trainer, history = run_training(config, label)
    skipped = sum(1 for h in history if h.get("skipped"))
    return StageResult(
        str(trainer.last_checkpoint) if trainer.last_checkpoint else None, len(history), skipped
    )


Train = Callable[[Config, str], StageResult]
Evaluate = Callable[[str, ModelConfig, EvalSettings, list[str]], Scores]


class CascadeRunner:
    """Runs ``pipeline``; ``trainer``/``evaluator`` stand in for training and evaluation (tests)."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        from_stage: str | None = None,
        log: TextIO | None = None,
        trainer: Train = train_stage,
        evaluator: Evaluate = evaluate_checkpoint,
    ):
        self.pipeline = pipeline
        self.from_stage = from_stage
        self.log = log or sys.stderr
        self.trainer = trainer
        self.evaluator = evaluator
        self.out = pipeline.output_dir
        self.state_path = self.out / STATE_FILE
        self.settings = pipeline.spec.eval
        self.eval_envs = list(self.settings.envs)
        self.names = [s.name for s in pipeline.stages]
        if from_stage is not None:
            pipeline.stage(from_stage)  # a clear error for an unknown name

    # ----- checks before any work -------------------------------------------------------------------

    def check(self) -> None:
        """Every stage's config builds, its teachers resolved against stand-ins (the start model, with a
        score on every eval env, for each checkpoint not trained yet): a ``ConfigError`` names the stage
        and the key before anything is trained."""
        start = self.pipeline.start_path
        scored = {env_id: {"mean": 0.0} for env_id in self.eval_envs}
        earlier = [Candidate(START, start, scored)]
        for stage in self.pipeline.stages:
            data = stage_data(self.pipeline, stage, start)
            refs = stage_teachers(stage, data)
            if refs:
                teachers, _ = choose_teachers(stage.name, refs, earlier, self.eval_envs, self.names)
                data = with_teachers(data, teachers)
            build_stage_config(stage, data)
            earlier.append(Candidate(stage.name, start, scored))

    # ----- state ------------------------------------------------------------------------------------

    def load_state(self) -> PipelineState:
        if not self.state_path.exists():
            return PipelineState(self.pipeline.spec.name)
        try:
            return build(PipelineState, json.loads(self.state_path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{self.state_path} is unreadable ({exc}); move it away to start the pipeline over"
            ) from None
        except ConfigError as exc:
            raise ConfigError(
                f"{self.state_path} is not a cascade state file ({exc}); move it away to start over"
            ) from None

    def save_state(self, state: PipelineState) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.to_dict(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.state_path)

    def _forget_from(self, state: PipelineState, name: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for stage_name in self.names[self.names.index(name) :]:
            state.stages.pop(stage_name, None)
            folder = self.out / stage_name
            if folder.exists():
                aside = folder.with_name(f"{stage_name}.replaced-{stamp}")
                folder.rename(aside)
                self._say(f"{stage_name}: redone; its previous run moved to {aside}")
        self.save_state(state)

    # ----- the run ----------------------------------------------------------------------------------

    def run(self) -> PipelineState:
        """Check, then train and evaluate every stage not finished yet; returns the state."""
        self.check()
        state = self.load_state()
        if self.from_stage is not None:
            self._forget_from(state, self.from_stage)
        start = self.pipeline.start_path
        if state.start is None or state.start.checkpoint != start:
            state.start = CheckpointRecord(start)
        self._evaluate(state, START, state.start)
        previous = start
        for stage in self.pipeline.stages:
            init = (
                previous
                if stage.init == PREVIOUS
                else start
                if stage.init == START
                else state.stages[stage.init].checkpoint
            )
            data = stage_data(self.pipeline, stage, init)
            digest = config_hash(data)
            record = state.stages.get(stage.name)
            if record is not None and record.config_hash != digest:
                raise ConfigError(
                    f"stage {stage.name} finished with another config (hash {record.config_hash}, now {digest}; "
                    f"e.g. a changed file, --set or start checkpoint): rerun with --from-stage {stage.name} to train "
                    "it and the stages after it again, or restore its config"
                )
            if record is None:
                record = self._train(state, stage, data, init, digest)
            else:
                self._say(f"{stage.name}: finished earlier ({record.checkpoint}); skipped")
            self._evaluate(state, stage.name, record)
            self._check_regressions(state, stage.name, record)
            if stage.chain:
                previous = record.checkpoint
        self.report(state)
        return state

    def _train(
        self, state: PipelineState, stage: StageSpec, data: dict[str, Any], init: str, digest: str
    ) -> StageRecord:
        refs = stage_teachers(stage, data)
        choices: dict[str, Any] = {}
        if refs:
            teachers, choices = choose_teachers(
                stage.name, refs, state.candidates(self.names), self.eval_envs, self.names
            )
            data = with_teachers(data, teachers)
            self._say(teacher_line(stage.name, choices))
        config = build_stage_config(stage, data)
        self._say(f"{stage.name}: training {stage.config} from {init} -> {data['train']['output_dir']}")
        started = time.perf_counter()
        result = self.trainer(config, f"stage {stage.name} ({stage.config})")
        gc.collect()
        record = StageRecord(
            checkpoint=result.checkpoint or init,
            config=stage.config,
            config_hash=digest,
            init=init,
            chain=stage.chain,
            steps=result.steps,
            steps_with_signal=result.steps - result.skipped,
            teachers=choices,
            train_s=round(time.perf_counter() - started, 1),
            finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        if result.checkpoint is None:
            self._say(
                f"{stage.name}: no checkpoint was written (0 steps); its checkpoint is the one it started from"
            )
        state.stages[stage.name] = record
        self.save_state(state)
        return record

    def _evaluate(self, state: PipelineState, label: str, record: CheckpointRecord) -> None:
        """Score ``record``'s checkpoint on every eval env it has no current score for."""
        todo = [e for e in self.eval_envs if (record.eval.get(e) or {}).get("key") != self.settings.key(e)]
        if not todo:
            return
        self._say(
            f"{label}: evaluating {record.checkpoint} on {len(todo)} env(s) "
            f"(greedy, {self.settings.max_tokens} tokens, first {self.settings.limit or 'all'} tasks)"
        )
        model = ModelConfig(**{k: v for k, v in self.pipeline.spec.model.items() if k != "path"})
        record.eval.update(self.evaluator(record.checkpoint, model, self.settings, todo))
        gc.collect()
        self.save_state(state)

    # ----- the report -------------------------------------------------------------------------------

    def _check_regressions(self, state: PipelineState, name: str, record: StageRecord) -> None:
        """Flag each eval env whose score after ``name`` fell more than the margin below its best so far
        (a branch trains a teacher aside, not the model the pipeline carries on: it raises no alarm)."""
        rows = self.rows(state)
        index = next(i for i, row in enumerate(rows) if row.name == name)
        margin = self.settings.regression_margin
        found = regressions(rows, index, self.eval_envs, margin) if record.chain else {}
        if found != record.regressions:
            record.regressions = found
            self.save_state(state)
        rows[index].regressions = found
        for line in alarm_lines([rows[index]], margin):
            self._say(line)

    def rows(self, state: PipelineState) -> list[EvalRow]:
        """The start model and each finished stage, in pipeline order, each with the row it started from."""
        rows = [EvalRow(START, state.start.eval if state.start else {})]
        index = {START: 0}
        previous = 0
        for stage in self.pipeline.stages:
            record = state.stages.get(stage.name)
            if record is None:
                continue
            parent = previous if stage.init == PREVIOUS else index.get(stage.init, 0)
            rows.append(EvalRow(stage.name, record.eval, parent, dict(record.regressions), not stage.chain))
            index[stage.name] = len(rows) - 1
            if stage.chain:
                previous = len(rows) - 1
        return rows

    def report(self, state: PipelineState) -> None:
        """Print the eval table and its alarms; write ``eval.json`` and ``eval.png`` (with matplotlib)."""
        rows = self.rows(state)
        margin = self.settings.regression_margin
        print(
            "held-out scores (mean over scored answers; change vs the checkpoint the stage started from; "
            f"! = more than {margin:g} below the best earlier checkpoint; {self.out / EVAL_FILE}):"
        )
        print(eval_table(rows, self.eval_envs))
        for line in alarm_lines(rows, margin):
            print(line)
        print(
            "steps with a learning signal: "
            + ", ".join(f"{n} {r.steps_with_signal}/{r.steps}" for n, r in state.stages.items())
        )
        payload = {
            "envs": self.eval_envs,
            "settings": {
                "max_tokens": self.settings.max_tokens,
                "limit": self.settings.limit,
                "sampling": "greedy",
                "regression_margin": margin,
            },
            "rows": [
                {
                    "stage": row.label,
                    "started_from": None if row.parent is None else rows[row.parent].label,
                    "results": row.scores,
                    "regressions": row.regressions,
                }
                for row in rows
            ],
            "teachers": {n: r.teachers for n, r in state.stages.items() if r.teachers},
        }
        (self.out / EVAL_FILE).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        curves = {n: stage_rewards(self.out / n) for n in self.names if n in state.stages}
        png = plot_cascade(rows, self.eval_envs, curves, self.out / PLOT_FILE)
        print(f"plot: {png}" if png else "plot skipped: matplotlib is not installed (pip install matplotlib)")

    def _say(self, text: str) -> None:
        print(f"cascade: {text}", file=self.log, flush=True)


def run_pipeline(
    path: str | Path,
    overrides: list[str] | tuple[str, ...] = (),
    from_stage: str | None = None,
    **kwargs: Any,
) -> PipelineState:
    """Load the pipeline file at ``path`` and run it (see ``CascadeRunner``)."""
    return CascadeRunner(load_pipeline(path, overrides), from_stage=from_stage, **kwargs).run()
