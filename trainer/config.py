"""Typed trainer configuration: dataclasses loaded from YAML, with ``key.sub=value`` overrides.

Unknown keys are errors (with a "did you mean"), values are checked against the field types, and
``load_config(None)`` gives the embedded default run (``trainer/configs/default.yaml``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import tempfile
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..core import CascadeError
from ..defaults import DEFAULT_CONCURRENCY, DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P
from ..mix import parse_mix


class ConfigError(CascadeError):
    """A trainer config that cannot be used as written."""


@dataclass
class ModelConfig:
    path: str = "embedded"
    """A local Hugging Face model folder, or ``embedded`` (SmolLM2-135M-Instruct shipped with the package)."""
    dtype: str = "auto"
    """Dtype of the trained weights: ``auto`` (float32 master weights), ``float32``, ``bfloat16``, ``float16``.

    Pure bf16 weights save memory but lose small updates (an lr of 3e-6 is below bf16 resolution),
    so the default keeps float32 weights and computes in bf16 through ``mixed_precision``."""
    mixed_precision: str = "auto"
    """Autocast dtype of the training forward pass: ``auto`` (bfloat16 on GPU, off on CPU), ``bfloat16``,
    ``float16`` or ``no``."""
    device: str = "auto"
    gradient_checkpointing: str | bool = "auto"
    """``auto``: on for GPU, off for CPU."""


@dataclass
class MixConfig:
    envs: dict[str, Any] = field(default_factory=dict)
    """``{env_id: weight}`` or ``{env_id: {weight: W, kwargs: {...}}}``; weights are normalised."""
    seed: int | None = None
    """Task-sampling seed (default: ``train.seed``)."""


@dataclass
class RolloutConfig:
    engine: str = "hf"
    group_size: int = 8
    prompts_per_step: int = 8
    max_tokens: int = DEFAULT_MAX_TOKENS
    """Maximum response length; a response cut here scores 0 (overlong penalty)."""
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    thinking: bool | None = None
    """Override every env's thinking mode (``None``: each env decides)."""
    concurrency: int = DEFAULT_CONCURRENCY
    dynamic_filtering: bool = True
    """Drop groups whose rewards are all equal and draw fresh prompts instead (GRPO; ``mopd`` ignores
    it: distillation needs no reward spread, so no group is ever left out)."""
    mask_groups_below: float | None = None
    """Leave out of the loss every group in which no scored rollout's reward is above this value
    (``null``: off). The agentless SWE RL stage masks prompts where no rollout scores > 0.5. Such a
    group is counted in ``batch/groups_below_threshold`` and, like a dynamically filtered one,
    replaced by fresh prompts while ``max_rounds`` allows (``max_rounds: 1`` only masks it)."""
    max_rounds: int = 4
    """Rollout rounds per step to fill the batch with informative groups."""
    max_oversampling: float = 2.0
    """Each round plays the missing groups divided by the keep rate seen so far (the share of groups
    not filtered out), at most this many times the missing groups; 1 plays exactly the shortfall."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimConfig:
    lr: float = 3e-6
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    max_grad_norm: float = 1.0
    warmup_steps: int = 0
    warmup_start_lr: float = 0.0
    micro_batch_size: int = 8
    """Sequences per forward/backward pass; gradients accumulate over the step's batch."""
    kl_coef: float = 0.0


@dataclass
class TrainConfig:
    steps: int = 100
    seed: int = 0
    output_dir: str = "runs/grpo"
    save_every: int = 50
    keep_checkpoints: int = 2
    resume: bool = True
    """Continue from the newest checkpoint in ``output_dir`` when there is one."""
    tensorboard: bool = True
    progress: bool = True
    plot: bool = True
    save_rollouts: bool = False


@dataclass
class HeldoutConfig:
    """A held-out check of what the run learned: before the first step and after the last, every task
    of ``env`` (made with ``kwargs``, e.g. its own ``tasks`` file, never one the mix trains on) is
    answered once, greedily, with ``rollout.max_tokens``, and the mean reward is reported."""

    env: str | None = None
    """An env id (``null``: no held-out check)."""
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class MOPDConfig:
    """Multi-domain on-policy distillation (``algorithm: mopd``; DESIGN.md §6, RECIPE.md §MOPD)."""

    teachers: dict[str, Any] = field(default_factory=dict)
    """``{env_id: teacher checkpoint folder}`` (a Hugging Face folder or ``embedded``). Teachers must
    share the student's tokenizer; env ids sharing a folder share one loaded model. ``auto`` is
    resolved by a cascade pipeline only (it replaces it before building the Config)."""
    default_teacher: str | None = None
    """The teacher of mix envs not listed in ``teachers`` (``null``: every mix env needs an entry)."""
    eps_low: float = 0.5
    """Lower bound of the importance-weight gate, in (0, 1]."""
    eps_high: float = 2.0
    """Upper bound of the importance-weight gate, >= 1."""
    normalization: str = "response"
    """``response``: eq. 4 (mean over each response's valid tokens, then over responses); ``token``:
    divide by every valid token of the batch (long responses weigh more)."""
    teacher_dtype: str = "auto"
    """Dtype of the teachers' weights for their forward passes: ``auto`` (bfloat16 on GPU, float32
    on CPU), ``float32``, ``bfloat16``, ``float16``."""
    teacher_engine: str = "hf"
    """How teachers score: ``hf`` (a transformers forward pass of ``logits / rollout.temperature``) or
    ``vllm`` (vLLM prompt logprobs, of the raw distribution: needs ``rollout.temperature`` 0 or 1)."""
    teacher_engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra ``vllm.LLM`` arguments of every vLLM teacher (``gpu_memory_utilization``, ``max_model_len``...)."""


@dataclass
class RayConfig:
    """Ray scale-out of env workers, sandboxes and judges."""

    address: str | None = None
    """``null``: everything runs in one process and Ray is never imported; ``auto`` joins a running
    cluster (or give a Ray address); ``local`` starts one with this machine's CPUs."""
    env_actors: int = 0
    """Actors per env of the mix (0: one per CPU of the cluster); each holds its own env instance."""
    actor_options: dict[str, Any] = field(default_factory=dict)
    """Ray's ``.options(...)`` for every env actor (``num_cpus``, ``resources``, ``runtime_env``...), plus the
    pool's own keys ``call_timeout_s``, ``retries``, ``ready_timeout_s`` and ``placement_strategy``
    (see ``cascade_envs.distributed``)."""


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    mix: MixConfig = field(default_factory=MixConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    heldout: HeldoutConfig = field(default_factory=HeldoutConfig)
    mopd: MOPDConfig = field(default_factory=MOPDConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    algorithm: str = "grpo"
    """The loss strategy (``trainer/strategies.py``): ``grpo``, ``mopd``, or one a plugin registered."""
    name: str = "grpo"
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def mix_weights(self) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
        """Weights and per-env kwargs of ``mix.envs`` (``rollout.thinking`` goes into every env's kwargs)."""
        try:
            weights, kwargs = parse_mix(self.mix.envs, source="mix.envs")
        except CascadeError as exc:
            raise ConfigError(str(exc)) from None
        if self.rollout.thinking is not None:
            for env_kwargs in kwargs.values():
                env_kwargs.setdefault("thinking", self.rollout.thinking)
        return weights, kwargs

    def heldout_env(self) -> tuple[str, dict[str, Any]] | None:
        """The held-out env id and its kwargs (``rollout.thinking`` applied), or ``None`` when unset."""
        if self.heldout.env is None:
            return None
        try:
            _, kwargs = parse_mix({self.heldout.env: {"weight": 1.0, "kwargs": self.heldout.kwargs}}, source="heldout")
        except CascadeError as exc:
            raise ConfigError(str(exc)) from None
        env_kwargs = kwargs[self.heldout.env]
        if self.rollout.thinking is not None:
            env_kwargs.setdefault("thinking", self.rollout.thinking)
        return self.heldout.env, env_kwargs


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _check_value(value: Any, tp: Any, where: str) -> Any:
    """Check (and lightly coerce: int -> float) ``value`` against the annotation ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in typing.get_args(tp):
            try:
                return _check_value(value, option, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{where}: {value!r} does not fit {tp}")
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{where}: expected null, got {value!r}")
        return None
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item,) = typing.get_args(tp) or (Any,)
        return [_check_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    raise ConfigError(f"{where}: unsupported field type {tp}")  # pragma: no cover - a bug in this module


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(names)})"
            raise ConfigError(f"unknown config key {path!r}{hint}")
        tp = hints[key]
        values[key] = _build(tp, value, path) if _is_dataclass_type(tp) else _check_value(value, tp, path)
    return cls(**values)


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``"optim.lr=1e-5"`` -> ``("optim.lr", 1e-05)``; the value is read as YAML."""
    import yaml

    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} must look like key.sub=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {exc}") from None
    if isinstance(value, str) and _looks_numeric(value):
        value = float(value)  # YAML 1.1 reads "1e-5" as a string
    return key.strip(), value


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip().lower() not in {"nan", "inf", "-inf", "+inf", "infinity", "-infinity"}


def default_config_path() -> Path:
    return Path(str(resources.files("cascade_envs.trainer").joinpath("configs/default.yaml")))


def read_yaml(path: str | Path) -> dict[str, Any]:
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return _fix_yaml_floats(data)


def _fix_yaml_floats(node: Any) -> Any:
    """YAML 1.1 (PyYAML) reads ``3e-6`` as a string; read such scalars as numbers."""
    if isinstance(node, dict):
        return {k: _fix_yaml_floats(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_fix_yaml_floats(v) for v in node]
    if isinstance(node, str) and _looks_numeric(node) and any(c in node.lower() for c in "e."):
        return float(node)
    return node


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config (``None``: the embedded default) and apply ``key.sub=value`` overrides."""
    data = read_yaml(default_config_path() if path is None else path)
    for text in overrides:
        key, value = parse_override(text)
        _set_path(data, key, value)
    config = _build(Config, data, "")
    validate(config)
    return config


def config_from_dict(data: dict[str, Any]) -> Config:
    config = _build(Config, data, "")
    validate(config)
    return config


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number_in(name: str, value: Any, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False, hint: str = "") -> None:
    """``value`` must be a finite number in the interval (``low_open``: ``low`` excluded, likewise ``high``)."""
    ok = _is_finite_number(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        if low is not None and high is not None:
            where = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        elif low is not None:
            where = f"{'>' if low_open else '>='} {low:g}"
        else:
            where = f"{'<' if high_open else '<='} {high:g}"
        raise ConfigError(f"{name} must be a finite number {where}, got {value!r}{hint}")


def check_output_dir(path: str, *, create: bool = False) -> Path:
    """``train.output_dir`` can be created and written; with ``create``, create it and try a write.

    Without ``create`` nothing is written: the nearest existing folder must be a writable directory.
    """
    if not path.strip():
        raise ConfigError("train.output_dir must not be empty")
    folder = Path(path).expanduser()
    if create:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            raise ConfigError(f"train.output_dir {path!r} is not writable: {exc.strerror or exc}") from None
        return folder
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"train.output_dir {path!r} cannot be created: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"train.output_dir {path!r} is not writable: no write permission on {existing}")
    return folder


def validate(config: Config) -> None:
    """Every setting in range before any work starts; ``ConfigError`` names the key at fault."""
    m, r, o, t = config.model, config.rollout, config.optim, config.train
    positive = {
        "rollout.group_size": r.group_size,
        "rollout.prompts_per_step": r.prompts_per_step,
        "rollout.max_tokens": r.max_tokens,
        "rollout.concurrency": r.concurrency,
        "rollout.max_rounds": r.max_rounds,
        "optim.micro_batch_size": o.micro_batch_size,
        "train.save_every": t.save_every,
        "train.keep_checkpoints": t.keep_checkpoints,
    }
    for name, value in positive.items():
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, got {value}")
    if t.steps < 0:
        raise ConfigError(f"train.steps must be >= 0, got {t.steps}")
    if o.warmup_steps < 0:
        raise ConfigError(f"optim.warmup_steps must be >= 0, got {o.warmup_steps}")
    if not 0 <= t.seed < 2**32:
        raise ConfigError(f"train.seed must be in [0, 2**32), got {t.seed}")
    if config.mix.seed is not None and config.mix.seed < 0:
        raise ConfigError(f"mix.seed must be >= 0, got {config.mix.seed}")

    # numbers: finite, and in the range where training means something
    _number_in("optim.lr", o.lr, low=0, low_open=True)
    _number_in("optim.max_grad_norm", o.max_grad_norm, low=0, low_open=True)
    _number_in("optim.eps", o.eps, low=0, low_open=True)
    _number_in("optim.weight_decay", o.weight_decay, low=0)
    _number_in("optim.kl_coef", o.kl_coef, low=0)
    if len(o.betas) != 2:
        raise ConfigError(f"optim.betas must be two numbers, got {o.betas!r}")
    for i, beta in enumerate(o.betas):
        _number_in(f"optim.betas[{i}]", beta, low=0, high=1, high_open=True)
    _number_in("optim.warmup_start_lr", o.warmup_start_lr, low=0,
               high=o.lr if o.warmup_steps > 0 else None, hint=" (warmup climbs from it to optim.lr)")
    _number_in("rollout.temperature", r.temperature, low=0, hint=" (0 samples greedily)")
    _number_in("rollout.top_p", r.top_p, low=0, high=1, low_open=True)
    _number_in("rollout.max_oversampling", r.max_oversampling, low=1, high=64)
    if r.mask_groups_below is not None and not _is_finite_number(r.mask_groups_below):
        raise ConfigError(f"rollout.mask_groups_below must be a finite number or null, got {r.mask_groups_below!r}")
    _validate_mopd_section(config.mopd)
    if config.ray.env_actors < 0:
        raise ConfigError(f"ray.env_actors must be >= 0, got {config.ray.env_actors}")
    if config.ray.address is not None and not config.ray.address.strip():
        raise ConfigError("ray.address must be null (one process), 'auto' or a Ray cluster address, got an empty string")

    # names
    if not m.path.strip():
        raise ConfigError("model.path must not be empty (a local Hugging Face model folder or 'embedded')")
    if m.dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise ConfigError(f"model.dtype must be auto, float32, bfloat16 or float16, got {m.dtype!r}")
    if m.gradient_checkpointing not in ("auto", True, False):
        raise ConfigError("model.gradient_checkpointing must be auto, true or false")
    if m.mixed_precision not in ("auto", "bfloat16", "float16", "no"):
        raise ConfigError(f"model.mixed_precision must be auto, bfloat16, float16 or no, got {m.mixed_precision!r}")
    if m.device != "auto":
        _check_device(m.device)
    if r.engine not in ("hf", "vllm"):
        raise ConfigError(f"rollout.engine must be 'hf' or 'vllm', got {r.engine!r}")
    check_output_dir(t.output_dir)
    config.mix_weights()
    config.heldout_env()
    from .strategies import make_strategy

    make_strategy(config)


MOPD_DTYPES = ("auto", "float32", "bfloat16", "float16")


def _validate_mopd_section(d: MOPDConfig) -> None:
    """The ``mopd:`` values that do not depend on the algorithm (teachers: ``check_mopd_teachers``)."""
    _number_in("mopd.eps_low", d.eps_low, low=0, high=1, low_open=True)
    _number_in("mopd.eps_high", d.eps_high, low=1)
    if d.normalization not in ("response", "token"):
        raise ConfigError(f"mopd.normalization must be response or token, got {d.normalization!r}")
    if d.teacher_dtype not in MOPD_DTYPES:
        raise ConfigError(f"mopd.teacher_dtype must be one of {', '.join(MOPD_DTYPES)}, got {d.teacher_dtype!r}")
    if d.teacher_engine not in ("hf", "vllm"):
        raise ConfigError(f"mopd.teacher_engine must be hf or vllm, got {d.teacher_engine!r}")


def mopd_teacher_paths(config: Config) -> dict[str, str]:
    """``{mix env id: teacher path}`` from ``mopd.teachers`` and ``mopd.default_teacher`` (unchecked)."""
    weights, _ = config.mix_weights()
    d = config.mopd
    paths: dict[str, str] = {}
    for env_id in weights:
        path = d.teachers.get(env_id, d.default_teacher)
        if path is not None:
            paths[env_id] = str(path)
    return paths


def check_mopd_teachers(config: Config) -> None:
    """With ``algorithm: mopd``: every mix env has a teacher whose folder exists (``ConfigError`` naming the key)."""
    from .model import model_path

    d = config.mopd
    if d.teacher_engine == "vllm" and config.rollout.temperature not in (0, 1):
        raise ConfigError(f"mopd.teacher_engine: vllm scores with the raw (T = 1) distribution, but rollout.temperature "
                          f"is {config.rollout.temperature}; use mopd.teacher_engine: hf or rollout.temperature: 1")
    weights, _ = config.mix_weights()
    missing = [env_id for env_id in weights if env_id not in d.teachers and d.default_teacher is None]
    if missing:
        raise ConfigError(f"mopd.teachers has no teacher for mix env(s) {', '.join(missing)}: add "
                          "mopd.teachers.<env id>=<checkpoint folder> or set mopd.default_teacher")
    entries = {f"mopd.teachers.{env_id}": path for env_id, path in d.teachers.items()}
    if d.default_teacher is not None:
        entries["mopd.default_teacher"] = d.default_teacher
    auto = [key for key, path in entries.items() if path == "auto"]
    if auto:
        raise ConfigError(f"{', '.join(auto)}: 'auto' is resolved only by a cascade pipeline (cascade-envs train "
                          "cascade.yaml picks each domain's teacher from earlier stages); to run this config on its "
                          "own, set each with --set <key>=<teacher checkpoint folder>")
    for key, path in entries.items():
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"{key} must be a teacher checkpoint folder or 'embedded', got {path!r}")
        try:
            model_path(path)
        except CascadeError as exc:
            raise ConfigError(f"{key}: {exc}") from None


def _check_device(name: str) -> None:
    try:
        import torch
    except ImportError:  # nothing to train with anyway; the trainer says so
        return
    try:
        torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"model.device must be auto or a torch device such as cpu or cuda:0, got {name!r}: "
                          f"{str(exc).splitlines()[0]}") from None
