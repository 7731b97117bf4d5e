"""The Cascade RL pipeline file: stages, how each stage's config is built, and MOPD teacher choice.

A pipeline file is a YAML mapping with a top-level ``stages:`` list (that key tells it from a
single-stage config)::

    name: cascade
    model: {path: /ckpt/sft}          # the start (SFT) checkpoint; other model.* keys go to every stage
    output_dir: runs/cascade
    eval: {max_tokens: 64, limit: 16, regression_margin: 0.05, envs: {cascade/MCQA-v0: {tasks: /data/mcqa_heldout.jsonl}}}
    stages:
      - {name: if_rl, config: if_rl, set: ["train.steps=2"]}
      - {name: rlhf_teacher, config: rlhf, init: start, chain: false}
      - {name: mopd, config: mopd}

``config`` is a file (relative paths from the pipeline file's folder) or a shipped config name
(``trainer/configs/NAME.yaml``). A stage trains its config with ``model.path`` = the checkpoint it
starts from (``init``: ``previous``, the last chained stage's, by default; ``start``; or an earlier
stage's name), ``train.output_dir`` = ``<output_dir>/<name>``, ``train.resume`` = true, then its
``set:`` overrides, then the command line's ``--set``: ``model.*``/``output_dir``/``eval.*`` change
the pipeline, ``STAGE:key=value`` one stage, any other key every stage. ``chain: false`` makes a
branch: its checkpoint is evaluated (and can be a teacher) but the next stage does not start from it.
In a stage with ``algorithm: mopd``, a teacher (``mopd.teachers.<env>`` or ``mopd.default_teacher``)
may be ``auto`` (the evaluated checkpoint with the best score on that env, ties to the later one),
``start`` or an earlier stage's name.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .checks import config_from_dict, default_config_path
from .config import Config, ConfigError, ModelConfig
from .evaluation import EvalSettings
from .strategies import make_strategy
from .teachers import AUTO, teacher_refs
from .typed_yaml import build, parse_override, read_yaml, set_path

T = TypeVar("T")
START = "start"
PREVIOUS = "previous"
PIPELINE_KEYS = ("name", "description", "model", "output_dir", "eval", "stages", "set")
SET_BY_PIPELINE = ("model.path", "train.output_dir", "train.resume")
STAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass
class StageSpec:
    name: str
    config: str
    init: str = PREVIOUS
    """``previous`` (the last chained stage's checkpoint, or the start model), ``start``, or an earlier stage."""
    chain: bool = True
    """``false``: a branch; the next ``previous`` stage does not start from its checkpoint."""
    set: list[str] = field(default_factory=list)


@dataclass
class PipelineSpec:
    stages: list[Any] = field(default_factory=list)
    name: str = "cascade"
    description: str = ""
    model: dict[str, Any] = field(default_factory=lambda: {"path": "embedded"})
    output_dir: str = "runs/cascade"
    eval: EvalSettings = field(default_factory=EvalSettings)
    set: list[str] = field(default_factory=list)
    """Overrides of every stage, applied before each stage's own ``set:``."""


@dataclass
class Pipeline:
    """A checked pipeline file plus the command line's overrides, sorted by where they apply."""

    spec: PipelineSpec
    stages: list[StageSpec]
    source: Path
    every_stage: list[str] = field(default_factory=list)
    per_stage: dict[str, list[str]] = field(default_factory=dict)

    @property
    def output_dir(self) -> Path:
        return Path(self.spec.output_dir).expanduser()

    @property
    def start_path(self) -> str:
        return str(self.spec.model.get("path", "embedded"))

    def stage(self, name: str) -> StageSpec:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise ConfigError(f"no stage named {name!r}; the stages are {', '.join(s.name for s in self.stages)}")


def shipped_dir() -> Path:
    return default_config_path().parent


def shipped_names() -> list[str]:
    return sorted(p.stem for p in shipped_dir().glob("*.yaml"))


def find_config(ref: str, base: Path | None = None) -> Path:
    """The file ``ref`` names: a path (``base``-relative first), else a shipped config name."""
    path = Path(ref).expanduser()
    candidates = [path] if path.is_absolute() else ([base / path] if base is not None else []) + [path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    stem = ref[:-5] if ref.endswith(".yaml") else ref
    if "/" not in stem and (shipped_dir() / f"{stem}.yaml").is_file():
        return shipped_dir() / f"{stem}.yaml"
    raise ConfigError(
        f"config {ref!r}: no such file, and no shipped config of that name "
        f"(shipped: {', '.join(shipped_names())})"
    )


def is_pipeline(data: dict[str, Any]) -> bool:
    return "stages" in data


def is_pipeline_file(path: str | Path) -> bool:
    return is_pipeline(read_yaml(Path(path)))


def load_pipeline(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Pipeline:
    """Read and check a pipeline file; ``--set`` overrides of the pipeline itself are applied here."""
    source = Path(path)
    data = read_yaml(source)
    if not is_pipeline(data):
        raise ConfigError(f"{source}: not a pipeline file (it has no top-level 'stages:' list)")
    raw = data.get("stages")
    names = [s.get("name") for s in raw if isinstance(s, dict)] if isinstance(raw, list) else []
    pipeline_sets, every, per_stage = _sort_overrides(overrides, [n for n in names if isinstance(n, str)])
    for text in pipeline_sets:
        set_path(data, *parse_override(text))
    spec = build(PipelineSpec, data)
    if not spec.stages:
        raise ConfigError(f"{source}: 'stages' must be a non-empty list")
    stages = [build(StageSpec, item, f"stages[{i}]") for i, item in enumerate(spec.stages)]
    _check_stages(stages)
    _check_eval(spec.eval)
    build(ModelConfig, spec.model, "model")  # the same keys and types as a stage's model section
    return Pipeline(spec, stages, source, every, per_stage)


def _sort_overrides(
    overrides: list[str] | tuple[str, ...], names: list[str]
) -> tuple[list[str], list[str], dict[str, list[str]]]:
    pipeline: list[str] = []
    every: list[str] = []
    per_stage: dict[str, list[str]] = {}
    for text in overrides:
        key = text.partition("=")[0]
        if ":" in key:
            stage, _, rest = text.partition(":")
            if stage not in names:
                raise ConfigError(f"--set {text!r}: no stage named {stage!r} (stages: {', '.join(names)})")
            per_stage.setdefault(stage, []).append(rest)
        elif key.strip().split(".")[0] in PIPELINE_KEYS:
            if key.strip().split(".")[0] in ("stages", "set"):
                raise ConfigError(
                    f"--set {text!r}: edit the pipeline file to change its stages or their set: lists"
                )
            pipeline.append(text)
        else:
            every.append(text)
    return pipeline, every, per_stage


def _check_stages(stages: list[StageSpec]) -> None:
    seen: list[str] = []
    for i, stage in enumerate(stages):
        where = f"stages[{i}]"
        if not STAGE_NAME.fullmatch(stage.name) or stage.name in (START, PREVIOUS, AUTO):
            raise ConfigError(
                f"{where}.name {stage.name!r} must be a folder name (letters, digits, _ . -) other than "
                f"{START}, {PREVIOUS} or {AUTO}"
            )
        if stage.name in seen:
            raise ConfigError(f"{where}.name {stage.name!r} is used twice")
        if stage.init not in (PREVIOUS, START) and stage.init not in seen:
            raise ConfigError(
                f"{where}.init {stage.init!r} must be previous, start or an earlier stage's name "
                f"({', '.join(seen) or 'none yet'})"
            )
        seen.append(stage.name)


def _check_eval(settings: EvalSettings) -> None:
    from ..registry import check_env_id

    if settings.max_tokens < 1:
        raise ConfigError(f"eval.max_tokens must be at least 1, got {settings.max_tokens}")
    if settings.limit is not None and settings.limit < 1:
        raise ConfigError(f"eval.limit must be at least 1 or null, got {settings.limit}")
    if settings.concurrency < 1:
        raise ConfigError(f"eval.concurrency must be at least 1, got {settings.concurrency}")
    if not 0.0 <= settings.regression_margin < 1.0:
        raise ConfigError(f"eval.regression_margin must be in [0, 1), got {settings.regression_margin}")
    for env_id, kwargs in settings.envs.items():
        try:
            check_env_id(env_id)
        except Exception as exc:
            raise ConfigError(f"eval.envs: {exc}") from None
        if kwargs is not None and not isinstance(kwargs, dict):
            raise ConfigError(f"eval.envs.{env_id} must be a mapping of env kwargs or null, got {kwargs!r}")
    for env_id, size in settings.group_sizes.items():
        if env_id not in settings.envs:
            raise ConfigError(f"eval.group_sizes.{env_id}: not an env of eval.envs")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"eval.group_sizes.{env_id} must be a positive integer, got {size!r}")


# ----- one stage's config --------------------------------------------------------------------------


def stage_data(pipeline: Pipeline, stage: StageSpec, init_path: str) -> dict[str, Any]:
    """The stage's config as a mapping (teachers unresolved): its file, the pipeline's model keys, its
    ``set:`` and the command line's overrides, then ``model.path``/``train.output_dir``/``train.resume``."""
    data = read_yaml(find_config(stage.config, pipeline.source.parent))
    if is_pipeline(data):
        raise ConfigError(
            f"stage {stage.name}: config {stage.config!r} is a pipeline file, not a stage config"
        )
    for section in ("model", "train"):
        if not isinstance(data.setdefault(section, {}), dict):
            raise ConfigError(f"stage {stage.name}: {section} must be a mapping")
    data["model"].update({k: v for k, v in pipeline.spec.model.items() if k != "path"})
    for text in [
        *pipeline.spec.set,
        *stage.set,
        *pipeline.every_stage,
        *pipeline.per_stage.get(stage.name, []),
    ]:
        key, value = parse_override(text)
        if key in SET_BY_PIPELINE:
            raise ConfigError(
                f"stage {stage.name}: {key} is set by the pipeline (model.path and output_dir at the "
                "pipeline's top level, init: to choose where a stage starts)"
            )
        set_path(data, key, value)
    data["model"]["path"] = init_path
    data["train"]["output_dir"] = str(pipeline.output_dir / stage.name)
    data["train"]["resume"] = True
    return data


def config_hash(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def build_stage_config(stage: StageSpec, data: dict[str, Any]) -> Config:
    """``Config`` of ``data``; a ``ConfigError`` names the stage and its config."""
    return _in_stage(stage, lambda: config_from_dict(data))


def stage_teachers(stage: StageSpec, data: dict[str, Any]) -> dict[str, str]:
    """``{mix env id: teacher reference}`` of a stage whose loss reads the teacher source (``{}`` for any
    other), from its typed but not yet checked config (its teachers may still be ``auto`` or a stage name)."""
    config = _in_stage(stage, lambda: build(Config, data))
    strategy = _in_stage(stage, lambda: make_strategy(config.algorithm, config.optim, config.mopd))
    if "teacher" not in strategy.sources:
        return {}
    weights, _ = _in_stage(stage, config.mix_weights)
    return teacher_refs(config.mopd, weights)


def with_teachers(data: dict[str, Any], teachers: dict[str, str]) -> dict[str, Any]:
    """A copy of ``data`` whose ``mopd.teachers`` is ``teachers`` (and no ``default_teacher``)."""
    out = json.loads(json.dumps(data))
    out["mopd"] = {**(out.get("mopd") or {}), "teachers": teachers, "default_teacher": None}
    return out


def _in_stage(stage: StageSpec, make: Callable[[], T]) -> T:
    try:
        return make()
    except ConfigError as exc:
        raise ConfigError(f"stage {stage.name} (config {stage.config}): {exc}") from None
