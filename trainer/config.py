"""The trainer's configuration types: one dataclass per YAML section, each checking its own values.

``typed_yaml`` reads YAML into these types (unknown keys and values outside a field's type, ``Literal``
modes included, are errors naming the key); ``checks`` loads a config and runs every section's
``check`` plus the rules that span sections. ``load_config(None)`` gives the embedded default run.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..core import CascadeError
from ..defaults import DEFAULT_CONCURRENCY, DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P
from ..mix import parse_mix

WeightDtype = Literal["auto", "float32", "bfloat16", "float16"]
MixedPrecision = Literal["auto", "bfloat16", "float16", "no"]
BatchSize = Literal["auto"] | int
"""A pass size setting: a number, or ``auto`` (sized per device: ``trainer/layout.py``)."""
AttnImplementation = Literal["auto", "sdpa", "eager", "flex_attention", "flash_attention_2"]
EngineName = Literal["hf", "vllm", "ray"]
TeacherEngineName = Literal["hf", "vllm"]
Normalization = Literal["response", "token"]


class ConfigError(CascadeError):
    """A trainer config that cannot be used as written."""


class Section:
    """A config section: ``check`` raises ``ConfigError`` naming the first key whose value cannot train."""

    def check(self) -> None:
        """Values in range (their types are the loader's to check)."""


@dataclass
class ModelConfig(Section):
    path: str = "embedded"
    """A local Hugging Face model folder, or ``embedded`` (SmolLM2-135M-Instruct shipped with the package)."""
    dtype: WeightDtype = "auto"
    """Dtype of the trained weights: ``auto`` (float32 master weights), ``float32``, ``bfloat16``, ``float16``.

    Pure bf16 weights save memory but lose small updates (an lr of 3e-6 is below bf16 resolution),
    so the default keeps float32 weights and computes in bf16 through ``mixed_precision``."""
    mixed_precision: MixedPrecision = "auto"
    """Autocast dtype of the training forward pass: ``auto`` (bfloat16 on GPU, off on CPU), ``bfloat16``,
    ``float16`` or ``no``."""
    device: str = "auto"
    """A torch device (``cuda``, ``cuda:1``, ``cpu``); ``auto``: ``cuda`` when available, else ``cpu``."""
    gradient_checkpointing: Literal["auto"] | bool = "auto"
    """``auto``: on for GPU, off for CPU."""
    attn_implementation: AttnImplementation = "auto"
    """The attention kernels (``trainer/attention.py``): ``sdpa``, ``eager``, ``flex_attention`` (flex kernels
    for packed rows, sdpa elsewhere), ``flash_attention_2`` (needs flash-attn); ``auto``: on CUDA
    flash_attention_2 where flash-attn is installed, else flex_attention; sdpa on CPU."""

    def check(self) -> None:
        if not self.path.strip():
            raise ConfigError(
                "model.path must not be empty (a local Hugging Face model folder or 'embedded')"
            )
        if self.mixed_precision == "float16":
            raise ConfigError(
                "model.mixed_precision: float16 needs loss scaling, which the trainer does not do; "
                "use bfloat16 (or no)"
            )
        if self.dtype == "float16":
            raise ConfigError(
                "model.dtype: float16 would train float16 weights without loss scaling; use bfloat16, or "
                "float32 (auto) weights with model.mixed_precision: bfloat16"
            )
        if self.device != "auto":
            _check_device(self.device)


@dataclass
class MixConfig(Section):
    envs: dict[str, Any] = field(default_factory=dict)
    """``{env_id: weight}`` or ``{env_id: {weight: W, kwargs: {...}}}``; weights are normalised."""
    seed: int | None = None
    """Task-sampling seed (default: ``train.seed``)."""

    def check(self) -> None:
        if self.seed is not None and self.seed < 0:
            raise ConfigError(f"mix.seed must be >= 0, got {self.seed}")
        _parsed(self.envs, "mix.envs")


@dataclass
class RolloutConfig(Section):
    engine: EngineName = "hf"
    """The rollout engine: ``hf`` (transformers, generating with the training model itself), ``vllm``
    (in-process, weights synced after each step) or ``ray`` (engine actors: ``trainer/ray_engine.py``)."""
    group_size: int = 8
    """Rollouts per prompt (G): GRPO's group, whose rewards give each other's baseline."""
    prompts_per_step: int = 8
    """Prompts (groups) each optimizer step trains on."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    """Maximum response length; a response cut here scores 0 (overlong penalty)."""
    temperature: float = DEFAULT_TEMPERATURE
    """Sampling temperature of the rollouts (0 samples greedily)."""
    top_p: float = DEFAULT_TOP_P
    """Nucleus sampling: the smallest set of tokens whose probability reaches ``top_p``."""
    thinking: bool | None = None
    """Override every env's thinking mode (``None``: each env decides)."""
    concurrency: int = DEFAULT_CONCURRENCY
    """Episodes played at once by the rollout runner (their generation requests batch in the engine)."""
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
    """Settings of the chosen engine: ``hf``: ``decoding`` (``auto``, ``shared``, ``static``, ``generate``),
    ``max_batch_size``; ``vllm``: extra ``vllm.LLM`` arguments; ``ray``: ``backend``, ``num_engines``... (see the
    scaling pages of the docs)."""

    def check(self) -> None:
        for key in ("group_size", "prompts_per_step", "max_tokens", "concurrency", "max_rounds"):
            _at_least_one(f"rollout.{key}", getattr(self, key))
        _number_in("rollout.temperature", self.temperature, low=0, hint=" (0 samples greedily)")
        _number_in("rollout.top_p", self.top_p, low=0, high=1, low_open=True)
        _number_in("rollout.max_oversampling", self.max_oversampling, low=1, high=64)
        if self.mask_groups_below is not None and not _is_finite_number(self.mask_groups_below):
            raise ConfigError(
                f"rollout.mask_groups_below must be a finite number or null, got {self.mask_groups_below!r}"
            )


@dataclass
class OptimConfig(Section):
    lr: float = 3e-6
    """AdamW's learning rate (after warmup)."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW's two moment coefficients, each in [0, 1)."""
    eps: float = 1e-8
    """AdamW's epsilon."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm before each step."""
    warmup_steps: int = 0
    """Steps of linear warmup from ``warmup_start_lr`` to ``lr`` (0: none)."""
    warmup_start_lr: float = 0.0
    """The learning rate of the first warmup step."""
    micro_batch_size: BatchSize = "auto"
    """Sequences per padded forward/backward pass (``train.packing: false``) and per scoring pass of the
    reference model and teachers; gradients accumulate over the step's batch. ``auto``: 8 on CPU; on
    GPU as many as the pass budget (``train.pack_tokens``) holds."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the frozen reference model (the start checkpoint; 0: no reference model)."""

    def check(self) -> None:
        if self.micro_batch_size != "auto":
            _at_least_one("optim.micro_batch_size", self.micro_batch_size)
        if self.warmup_steps < 0:
            raise ConfigError(f"optim.warmup_steps must be >= 0, got {self.warmup_steps}")
        _number_in("optim.lr", self.lr, low=0, low_open=True)
        _number_in("optim.max_grad_norm", self.max_grad_norm, low=0, low_open=True)
        _number_in("optim.eps", self.eps, low=0, low_open=True)
        _number_in("optim.weight_decay", self.weight_decay, low=0)
        _number_in("optim.kl_coef", self.kl_coef, low=0)
        if len(self.betas) != 2:
            raise ConfigError(f"optim.betas must be two numbers, got {self.betas!r}")
        for i, beta in enumerate(self.betas):
            _number_in(f"optim.betas[{i}]", beta, low=0, high=1, high_open=True)
        _number_in(
            "optim.warmup_start_lr",
            self.warmup_start_lr,
            low=0,
            high=self.lr if self.warmup_steps > 0 else None,
            hint=" (warmup climbs from it to optim.lr)",
        )


@dataclass
class TrainConfig(Section):
    steps: int = 100
    """Optimizer steps of the run (one rollout batch each)."""
    seed: int = 0
    """Seeds every RNG of the run (each rank adds its rank): the task draw (unless ``mix.seed``) and the sampling."""
    output_dir: str = "runs/grpo"
    """Where metrics, checkpoints, plots and held-out scores go (must be writable)."""
    save_every: int = 50
    """A checkpoint every N steps (and always after the last, and after the step a SIGTERM stops)."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept in ``output_dir/checkpoints``; older ones are deleted."""
    resume: bool = True
    """Continue from the newest checkpoint in ``output_dir`` when there is one."""
    tensorboard: bool = True
    """Also write the metrics as TensorBoard events (``output_dir/tensorboard``)."""
    progress: bool = True
    """Show a progress bar with the step's fill ratio and reward."""
    plot: bool = True
    """Write ``rewards.png`` (the reward per step, per env) at the end."""
    save_rollouts: bool = False
    """Write every episode (messages, tokens, logprobs, reward) to ``output_dir/rollouts.jsonl``."""
    world_size: int = 1
    """Data-parallel ranks (``trainer/parallel``): above 1, ``cascade-envs train`` starts that many
    processes with torchrun and shards the model over them with FSDP2."""
    launcher: Literal["torchrun", "ray"] = "torchrun"
    """Sharded runs: ``torchrun`` (this machine) or ``ray`` (one worker per rank in a placement group of
    the cluster at ``ray.address``, a local one when unset: ``trainer/ray_ranks.py``); ``ray`` is refused
    in a single process."""
    cpu_offload: bool = False
    """Sharded runs: keep the parameter shards and optimizer state in CPU memory (FSDP2 CPU offload);
    refused in a single process."""
    collective_timeout_s: float = 600.0
    """Sharded runs: the bound of every collective (and of process-group setup); a rank that does not
    answer within it stops the run."""
    packing: Literal["auto"] | bool = "auto"
    """Pack the optimizer pass's sequences into rows (``packing.py``) instead of padding them. ``auto``
    (``trainer/layout.py``): when packed rows reach a fused kernel (flex, flash-attention varlen), the
    layout that measures faster on the first step's sequences; else packed on CPU, padded on CUDA.
    The choice is logged."""
    pack_tokens: BatchSize = "auto"
    """The token budget of one pass (a packed row; with ``optim.micro_batch_size: auto`` a padded
    micro-batch too; a longer sequence gets a pass of its own). ``auto``: 1024 on CPU; on CUDA what a
    share of the free device memory holds, estimated from the model's shape (``trainer/layout.py``)."""

    def check(self) -> None:
        _at_least_one("train.save_every", self.save_every)
        _at_least_one("train.world_size", self.world_size)
        if not (_is_finite_number(self.collective_timeout_s) and self.collective_timeout_s > 0):
            raise ConfigError(f"train.collective_timeout_s must be > 0, got {self.collective_timeout_s}")
        if self.pack_tokens != "auto":
            _at_least_one("train.pack_tokens", self.pack_tokens)
        _at_least_one("train.keep_checkpoints", self.keep_checkpoints)
        if self.steps < 0:
            raise ConfigError(f"train.steps must be >= 0, got {self.steps}")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"train.seed must be in [0, 2**32), got {self.seed}")
        check_output_dir(self.output_dir)


@dataclass
class HeldoutConfig(Section):
    """A held-out check of what the run learned: before the first step and after the last, every task
    of ``env`` (made with ``kwargs``, e.g. its own ``tasks`` file, never one the mix trains on) is
    answered once, greedily, with ``rollout.max_tokens``, and the mean reward is reported."""

    env: str | None = None
    """An env id (``null``: no held-out check)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """The held-out env's constructor arguments, e.g. its own ``tasks`` file."""

    def check(self) -> None:
        if self.env is not None:
            _parsed({self.env: {"weight": 1.0, "kwargs": self.kwargs}}, "heldout")


@dataclass
class MOPDConfig(Section):
    """Multi-domain on-policy distillation (``algorithm: mopd``; DESIGN.md §6, RECIPE.md §MOPD).

    The teacher rules (which env gets which teacher, what a teacher may be) live in ``teachers.py``."""

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
    normalization: Normalization = "response"
    """``response``: eq. 4 (mean over each response's valid tokens, then over responses); ``token``:
    divide by every valid token of the batch (long responses weigh more)."""
    teacher_dtype: WeightDtype = "auto"
    """Dtype of the teachers' weights for their forward passes: ``auto`` (bfloat16 on GPU, float32
    on CPU), ``float32``, ``bfloat16``, ``float16``."""
    teacher_engine: TeacherEngineName = "hf"
    """How teachers score: ``hf`` (a transformers forward pass of ``logits / rollout.temperature``) or
    ``vllm`` (vLLM prompt logprobs, of the raw distribution: needs ``rollout.temperature`` 0 or 1)."""
    teacher_engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra ``vllm.LLM`` arguments of every vLLM teacher (``gpu_memory_utilization``, ``max_model_len``...)."""
    teacher_placement: Literal["local", "ray"] = "local"
    """``local``: each trainer process loads its teachers; ``ray``: one Ray actor per teacher folder,
    shared by every rank (``trainer/ray_teacher.py``), for teachers that do not fit beside each rank."""
    teacher_actor_options: dict[str, Any] = field(default_factory=dict)
    """Ray ``.options()`` of each teacher actor (``num_cpus``, ``num_gpus``...) plus ``call_timeout_s``
    and ``ready_timeout_s``."""

    def check(self) -> None:
        _number_in("mopd.eps_low", self.eps_low, low=0, high=1, low_open=True)
        _number_in("mopd.eps_high", self.eps_high, low=1)


@dataclass
class RayConfig(Section):
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

    def check(self) -> None:
        if self.env_actors < 0:
            raise ConfigError(f"ray.env_actors must be >= 0, got {self.env_actors}")
        if self.address is not None and not self.address.strip():
            raise ConfigError(
                "ray.address must be null (one process), 'auto' or a Ray cluster address, got an empty string"
            )


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
    """The run's name, printed at the start."""
    description: str = ""
    """A line describing the run (free text)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def sections(self) -> list[Section]:
        return [
            value for f in dataclasses.fields(self) if isinstance(value := getattr(self, f.name), Section)
        ]

    def mix_weights(self) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
        """Weights and per-env kwargs of ``mix.envs`` (``rollout.thinking`` goes into every env's kwargs)."""
        weights, kwargs = _parsed(self.mix.envs, "mix.envs")
        for env_kwargs in kwargs.values():
            self._apply_thinking(env_kwargs)
        return weights, kwargs

    def heldout_env(self) -> tuple[str, dict[str, Any]] | None:
        """The held-out env id and its kwargs (``rollout.thinking`` applied), or ``None`` when unset."""
        if self.heldout.env is None:
            return None
        _, kwargs = _parsed({self.heldout.env: {"weight": 1.0, "kwargs": self.heldout.kwargs}}, "heldout")
        return self.heldout.env, self._apply_thinking(kwargs[self.heldout.env])

    def _apply_thinking(self, env_kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.rollout.thinking is not None:
            env_kwargs.setdefault("thinking", self.rollout.thinking)
        return env_kwargs


def model_path(path: str) -> Path:
    """The folder of a ``model.path``-like setting (``embedded``: the packaged SmolLM2-135M-Instruct); a
    ``CascadeError`` saying what is wrong when it is not a Hugging Face model folder."""
    if path == "embedded":
        from ..policies.embedded import embedded_model_path

        return Path(embedded_model_path())
    folder = Path(path).expanduser()
    if not folder.exists():
        raise CascadeError(
            f"model path {path!r} does not exist (give a local Hugging Face model folder or 'embedded')"
        )
    if not (folder / "config.json").is_file():
        raise CascadeError(f"model path {path!r} is not a Hugging Face model folder (no config.json)")
    return folder


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


# ----- value checks ---------------------------------------------------------------------------------


def _parsed(envs: Any, source: str) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    try:
        return parse_mix(envs, source=source)
    except CascadeError as exc:
        raise ConfigError(str(exc)) from None


def _at_least_one(name: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{name} must be at least 1, got {value}")


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number_in(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    hint: str = "",
) -> None:
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


def _check_device(name: str) -> None:
    try:
        import torch
    except ImportError:  # nothing to train with anyway; the trainer says so
        return
    try:
        torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(
            f"model.device must be auto or a torch device such as cpu or cuda:0, got {name!r}: "
            f"{str(exc).splitlines()[0]}"
        ) from None
