"""Running a Cascade RL pipeline: check every stage, train them in order, evaluate, resume.

``output_dir/cascade_state.json`` records the start model's evaluation and each finished stage
(checkpoint, config hash, steps, evaluation, teachers, times). Rerunning the same command skips
finished stages and continues an unfinished one from its own checkpoints (the trainer resumes from
its ``output_dir``). ``from_stage`` forgets that stage and every later one and moves their folders
aside (``<name>.replaced-<time>``), so they are trained again. A finished stage whose config changed
since (another hash) is refused with a one-line hint (redo it with ``--from-stage``), never silently
reused or retrained. Stored scores whose eval settings changed are recomputed from the checkpoint.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .cascade import (
    AUTO,
    START,
    Candidate,
    Pipeline,
    StageSpec,
    build_stage_config,
    choose_teachers,
    config_hash,
    stage_data,
    teacher_line,
    teacher_refs,
    with_teachers,
)
from .config import ConfigError, ModelConfig
from .evaluation import eval_table, evaluate_checkpoint, plot_eval

STATE_FILE = "cascade_state.json"
EVAL_FILE = "eval.json"
PLOT_FILE = "eval.png"


@dataclass
class StageResult:
    """What training one stage left: its last checkpoint (``None``: no step was saved) and step counts."""

    checkpoint: str | None
    steps: int
    skipped: int


def train_stage(config: Any, label: str) -> StageResult:
    """Train one stage's ``Config`` with the trainer, as ``cascade-envs train`` does."""
    from .cli import run_training

    trainer, history = run_training(config, label)
    skipped = sum(1 for h in history if h.get("skipped"))
    return StageResult(str(trainer.last_checkpoint) if trainer.last_checkpoint else None, len(history), skipped)


class CascadeRunner:
    """Runs ``pipeline``; ``trainer``/``evaluator`` stand in for training and evaluation (tests)."""

    def __init__(self, pipeline: Pipeline, *, from_stage: str | None = None, log: TextIO | None = None,
                 trainer: Any = train_stage, evaluator: Any = evaluate_checkpoint):
        self.pipeline = pipeline
        self.from_stage = from_stage
        self.log = log or sys.stderr
        self.trainer = trainer
        self.evaluator = evaluator
        self.out = pipeline.output_dir
        self.state_path = self.out / STATE_FILE
        self.settings = pipeline.spec.eval
        self.eval_envs = list(self.settings.envs)
        if from_stage is not None:
            pipeline.stage(from_stage)  # a clear error for an unknown name

    # ----- checks before any work -------------------------------------------------------------------

    def check(self) -> None:
        """Every stage's config builds (with stand-ins for checkpoints not trained yet): a ``ConfigError``
        names the stage and the key before anything is trained."""
        start = self.pipeline.start_path
        earlier: list[str] = []
        for stage in self.pipeline.stages:
            data = stage_data(self.pipeline, stage, start)
            refs = teacher_refs(data)
            for env_id, ref in refs.items():
                if ref in {s.name for s in self.pipeline.stages} - set(earlier):
                    raise ConfigError(f"stage {stage.name}: mopd.teachers.{env_id} names stage {ref!r}, which does not "
                                      "run before it")
                if ref == AUTO and env_id not in self.eval_envs:
                    raise ConfigError(f"stage {stage.name}: mopd.teachers.{env_id} is auto, but {env_id} is not "
                                      "evaluated: add it to eval.envs (with held-out tasks) or name a checkpoint")
            stand_in = {env_id: start if ref in (AUTO, START) or ref in earlier else ref
                        for env_id, ref in refs.items()}
            build_stage_config(stage, with_teachers(data, stand_in) if refs else data)
            earlier.append(stage.name)

    # ----- state ------------------------------------------------------------------------------------

    def load_state(self) -> dict[str, Any]:
        if not self.state_path.exists():
            return {"name": self.pipeline.spec.name, "start": {}, "stages": {}}
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.state_path} is unreadable ({exc}); move it away to start the pipeline over") from None
        if not isinstance(state, dict) or not isinstance(state.get("stages"), dict):
            raise ConfigError(f"{self.state_path} is not a cascade state file; move it away to start over")
        return state

    def save_state(self, state: dict[str, Any]) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.state_path)

    def _forget_from(self, state: dict[str, Any], name: str) -> None:
        names = [s.name for s in self.pipeline.stages]
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for stage_name in names[names.index(name):]:
            state["stages"].pop(stage_name, None)
            folder = self.out / stage_name
            if folder.exists():
                aside = folder.with_name(f"{stage_name}.replaced-{stamp}")
                folder.rename(aside)
                self._say(f"{stage_name}: redone; its previous run moved to {aside}")
        self.save_state(state)

    # ----- the run ----------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Check, then train and evaluate every stage not finished yet; returns the state."""
        self.check()
        state = self.load_state()
        if self.from_stage is not None:
            self._forget_from(state, self.from_stage)
        start = self.pipeline.start_path
        if state["start"].get("checkpoint") != start:
            state["start"] = {"checkpoint": start, "eval": {}}
        self._evaluate(state, START, state["start"])
        previous = start
        for stage in self.pipeline.stages:
            init = previous if stage.init == "previous" else start if stage.init == START else \
                state["stages"][stage.init]["checkpoint"]
            data = stage_data(self.pipeline, stage, init)
            digest = config_hash(data)
            record = state["stages"].get(stage.name)
            if record is not None and record.get("config_hash") != digest:
                raise ConfigError(
                    f"stage {stage.name} finished with another config (hash {record.get('config_hash')}, now {digest}; "
                    f"e.g. a changed file, --set or start checkpoint): rerun with --from-stage {stage.name} to train "
                    "it and the stages after it again, or restore its config")
            if record is None:
                record = self._train(state, stage, data, init, digest)
            else:
                self._say(f"{stage.name}: finished earlier ({record['checkpoint']}); skipped")
            self._evaluate(state, stage.name, record)
            if stage.chain:
                previous = record["checkpoint"]
        self.report(state)
        return state

    def _train(self, state: dict[str, Any], stage: StageSpec, data: dict[str, Any], init: str,
               digest: str) -> dict[str, Any]:
        refs = teacher_refs(data)
        choices: dict[str, Any] = {}
        if refs:
            teachers, choices = choose_teachers(stage.name, refs, self._candidates(state), self.eval_envs)
            data = with_teachers(data, teachers)
            self._say(teacher_line(stage.name, choices))
        config = build_stage_config(stage, data)
        self._say(f"{stage.name}: training {stage.config} from {init} -> {data['train']['output_dir']}")
        started = time.perf_counter()
        result = self.trainer(config, f"stage {stage.name} ({stage.config})")
        gc.collect()
        record = {
            "config": stage.config, "config_hash": digest, "init": init, "chain": stage.chain,
            "checkpoint": result.checkpoint or init, "steps": result.steps,
            "steps_with_signal": result.steps - result.skipped, "teachers": choices,
            "train_s": round(time.perf_counter() - started, 1),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "eval": {},
        }
        if result.checkpoint is None:
            self._say(f"{stage.name}: no checkpoint was written (0 steps); its checkpoint is the one it started from")
        state["stages"][stage.name] = record
        self.save_state(state)
        return record

    def _candidates(self, state: dict[str, Any]) -> list[Candidate]:
        found = [Candidate(START, state["start"]["checkpoint"], state["start"].get("eval", {}))]
        for stage in self.pipeline.stages:
            record = state["stages"].get(stage.name)
            if record is not None:
                found.append(Candidate(stage.name, record["checkpoint"], record.get("eval", {})))
        return found

    def _evaluate(self, state: dict[str, Any], label: str, record: dict[str, Any]) -> None:
        """Score ``record``'s checkpoint on every eval env it has no current score for."""
        scores = record.setdefault("eval", {})
        todo = [e for e in self.eval_envs if (scores.get(e) or {}).get("key") != self.settings.key(e)]
        if not todo:
            return
        self._say(f"{label}: evaluating {record['checkpoint']} on {len(todo)} env(s) "
                  f"(greedy, {self.settings.max_tokens} tokens, first {self.settings.limit or 'all'} tasks)")
        model = ModelConfig(**{k: v for k, v in self.pipeline.spec.model.items() if k != "path"})
        scores.update(self.evaluator(record["checkpoint"], model, self.settings, todo))
        gc.collect()
        self.save_state(state)

    # ----- the report -------------------------------------------------------------------------------

    def rows(self, state: dict[str, Any]) -> list[tuple[str, dict[str, dict[str, Any]]]]:
        rows = [(START, state["start"].get("eval", {}))]
        for stage in self.pipeline.stages:
            record = state["stages"].get(stage.name)
            if record is not None:
                rows.append((stage.name if stage.chain else f"{stage.name} (branch)", record.get("eval", {})))
        return rows

    def report(self, state: dict[str, Any]) -> None:
        """Print the eval table; write ``eval.json`` and the plot (when matplotlib is installed)."""
        rows = self.rows(state)
        print(f"held-out scores (mean over scored answers; change vs the row above; {self.out / EVAL_FILE}):")
        print(eval_table(rows, self.eval_envs))
        signal = [(n, r["steps_with_signal"], r["steps"]) for n, r in state["stages"].items() if "steps" in r]
        print("steps with a learning signal: " + ", ".join(f"{n} {s}/{t}" for n, s, t in signal))
        payload = {"envs": self.eval_envs, "settings": {"max_tokens": self.settings.max_tokens,
                                                       "limit": self.settings.limit, "sampling": "greedy"},
                   "rows": [{"stage": label, "results": results} for label, results in rows],
                   "teachers": {n: r["teachers"] for n, r in state["stages"].items() if r.get("teachers")}}
        (self.out / EVAL_FILE).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        png = plot_eval(rows, self.eval_envs, self.out / PLOT_FILE)
        print(f"plot: {png}" if png else "plot skipped: matplotlib is not installed (pip install matplotlib)")

    def _say(self, text: str) -> None:
        print(f"cascade: {text}", file=self.log, flush=True)


def run_pipeline(path: str | Path, overrides: list[str] | tuple[str, ...] = (), from_stage: str | None = None,
                 **kwargs: Any) -> dict[str, Any]:
    """Load the pipeline file at ``path`` and run it (see ``CascadeRunner``)."""
    from .cascade import load_pipeline

    return CascadeRunner(load_pipeline(path, overrides), from_stage=from_stage, **kwargs).run()


def is_pipeline_file(path: str | Path) -> bool:
    from .cascade import is_pipeline
    from .config import read_yaml

    return is_pipeline(read_yaml(Path(path)))
