"""``ShardedTrainer``: the single-process ``Trainer`` on N data-parallel ranks, with the same numbers.

Per step, every rank draws the same prompts (the mix sampler is seeded alike on every rank) and plays
its contiguous slice of them (``group_slice``); the played groups are gathered in prompt order, so
every rank builds the step's batch exactly as one process would: filtering, oversampling and the
per-group advantages all see the whole batch. Training then splits the kept groups (never one
group across ranks; slices differ by at most one group when the count does not divide) and each rank
trains its slice with the loss normalised by the whole batch's token and response counts (eq. 1 and
eq. 4 unchanged). Ranks with fewer micro-batches run idle ones (zero loss) so that every FSDP
collective is matched. Metric sums are added over ranks: the logged numbers are the 1-process ones.

The model is sharded with FSDP2 (``fsdp.py``). A local engine (``hf``, ``vllm``) generates on each
rank with a full copy (``rollout_model``), refreshed from the shards after every optimizer step;
with ``rollout.engine: ray`` the engines live in Ray actors and no rank keeps a copy: the shards are
gathered bucket by bucket straight into the engines. Checkpoints: DCP shards of model and optimizer,
each rank's RNG, and rank 0 writes the consolidated Hugging Face weights and the trainer state
(``dcp.py``, ``checkpoint.py``), so any world size, or one plain process, resumes.
"""

from __future__ import annotations

import copy
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...rollout.runner import GroupResult, RolloutRunner
from .. import checkpoint as ckpt
from ..config import Config
from ..layout import PassSize, rule
from ..loop import Trainer, TrainingError
from ..model import MicroBatch, _full_logits, token_logprobs
from ..packing import PackedBatch
from ..precision import autocast, compute_dtype
from ..sequence import TrainSequence
from ..sources import LogprobSource
from .dcp import load_plain_optimizer, load_sharded, save_sharded
from .fsdp import full_state_dict, grad_norm_value, shard_model, sum_gradients
from .ranks import Ranks, group_slice

RNG_DIR = "rng"


class ShardedTrainer(Trainer):
    """A ``Trainer`` on one rank of a sharded run; every rank builds one with the same config."""

    def __init__(
        self,
        config: Config,
        ranks: Ranks,
        *,
        model: Any = None,
        tokenizer: Any = None,
        teachers: LogprobSource | None = None,
    ):
        self.ranks = ranks
        self.rank = ranks.rank
        ranks.check_config(config.to_dict())
        super().__init__(config, model=model, tokenizer=tokenizer, teachers=teachers)

    # ----- model and rollouts ----------------------------------------------------------------------

    @property
    def local_engine(self) -> bool:
        """A local engine generates with a full copy on this rank; a Ray engine takes the shards."""
        return self.config.rollout.engine != "ray"

    def _prepare_model(self, model: Any) -> Any:
        if self.local_engine:
            self.rollout_model = copy.deepcopy(model)
        device = next(model.parameters()).device
        dtype = compute_dtype(self.config.model, device) if device.type == "cuda" else None
        return shard_model(model, self.ranks.world_size, device, dtype, self.config.train.cpu_offload)

    def _log_dir(self) -> Path:
        return self.output_dir if self.ranks.is_main else self.output_dir / "ranks" / f"rank_{self.rank}"

    def _play(self, runner: RolloutRunner, items: list[tuple[str, Any]]) -> list[GroupResult]:
        mine = group_slice(len(items), self.ranks.world_size, self.rank)
        played = runner.run(items[mine.start : mine.stop])
        for group in played:
            for episode in group.episodes:
                episode.group += mine.start  # the index one process would have given it
        return [g for part in self.ranks.gather(played, "rollouts") for g in part]

    def _sync_engine(self) -> None:
        if not self.local_engine:
            super()._sync_engine()  # every rank: RayEngine gathers each sharded bucket collectively
            return
        full = full_state_dict(self.model)
        with torch.no_grad():
            target = self.rollout_model.state_dict()
            for name, tensor in full.items():
                target[name].copy_(tensor)
        self.engine.sync_weights(self.rollout_model)

    # ----- the optimizer pass ------------------------------------------------------------------------

    def _train_slice(self, sequences: list[TrainSequence]) -> list[TrainSequence]:
        groups = 1 + max((s.group for s in sequences), default=-1)
        mine = group_slice(groups, self.ranks.world_size, self.rank)
        return [s for s in sequences if s.group in mine]

    def _check_processes(self, config: Config) -> None:
        """A rank may use every sharded-run setting."""

    def _start_fresh(self) -> None:
        # rank 0 sets the earlier run aside before any rank writes its logs
        if self.ranks.is_main:
            super()._start_fresh()
        self.ranks.barrier("setting the earlier run aside")

    def _choose_layout(self, sequences: list[TrainSequence], size: PassSize) -> tuple[bool, str]:
        # no timing in a sharded run: every rank must take the same layout
        if self.config.train.packing != "auto":
            return super()._choose_layout(sequences, size)
        packed = rule(self.model)
        return packed, f"train.packing auto in a sharded run: {'packed' if packed else 'padded'} (rule)"

    def _micro_batches(self, sequences: list[TrainSequence], size: PassSize, packed: bool) -> list[list[int]]:
        parts = super()._micro_batches(sequences, size, packed)
        most = max(self.ranks.gather(len(parts), "micro-batch counts"))
        return parts + [[] for _ in range(most - len(parts))]

    def _logprobs(self, mb: MicroBatch | PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        # one forward per pass on every rank (a packed row is one; the padded shared-prompt path
        # runs two): FSDP's all-gathers must pair up across ranks
        if isinstance(mb, PackedBatch):
            return super()._logprobs(mb)
        temperature = self.config.rollout.temperature if self.config.rollout.temperature > 0 else 1.0
        with autocast(self.config.model, self.device):
            logits = _full_logits(self.model, mb)
        if temperature != 1.0:
            logits = logits / temperature
        logp, entropy = token_logprobs(logits, mb.response_ids, entropy=True)
        return logp, entropy

    def _idle_pass(self) -> None:
        ids = torch.full((1, 1), self.pad_id, dtype=torch.long, device=self.device)
        with autocast(self.config.model, self.device):
            logits = self.model(input_ids=ids, use_cache=False).logits
        (logits.float().sum() * 0.0).backward()

    def _agree_to_stop(self, requested: bool) -> bool:
        return any(self.ranks.gather(requested, "the stop request"))

    def _reduce(self, sums: dict[str, float]) -> dict[str, float]:
        return self.ranks.sum(sums, "metric sums")

    def _clip_grad_norm(self) -> float:
        params = sum_gradients(self.model, self.ranks.world_size)
        return grad_norm_value(torch.nn.utils.clip_grad_norm_(params, self.config.optim.max_grad_norm))

    def _score_heldout(self, when: str) -> None:
        # rank 0 writes the score; the others score too (same wall time), so no rank waits on a
        # collective for the whole evaluation
        if self.ranks.is_main:
            super()._score_heldout(when)
        else:
            self.evaluate_heldout()
        self.ranks.barrier(f"the held-out score ({when})")

    # ----- checkpoints -------------------------------------------------------------------------------

    def save(self) -> Path:
        local_ok = all(
            bool(torch.isfinite(p.to_local() if hasattr(p, "to_local") else p).all())
            for p in self.model.parameters()
        )
        if not all(self.ranks.gather(local_ok, "weight checks")):
            where = (
                f"the last good checkpoint is {self.last_checkpoint}"
                if self.last_checkpoint
                else "none was written"
            )
            raise TrainingError(
                f"step {self.step}: a weight is not finite, so no checkpoint was written ({where}). "
                "Lower optim.lr, or use float32 (model.dtype=float32)."
            )
        staging = ckpt.staging_dir(self.output_dir, self.step)
        if self.ranks.is_main:
            shutil.rmtree(staging, ignore_errors=True)
            (staging / RNG_DIR).mkdir(parents=True)
        self.ranks.barrier("checkpoint staging")
        save_sharded(staging / ckpt.SHARDED_DIR, self.model, self.optimizer)
        torch.save(ckpt.rng_state(), staging / RNG_DIR / f"rank_{self.rank:05d}.pt")
        self.ranks.barrier("checkpoint shards")
        # the consolidated weights: the synced rollout copy, or (Ray engines) the shards gathered on rank 0
        weights = None if self.local_engine else full_state_dict(self.model, cpu_offload=True)
        if self.ranks.is_main:
            state = {
                "optimizer": ckpt.SHARDED_OPTIMIZER,
                "mix": self.mix.state_dict(),
                "batch": self.builder.state_dict(),
                "config": self.config.to_dict(),
                "world_size": self.ranks.world_size,
            }
            ckpt.save_checkpoint(
                self.output_dir,
                self.step,
                self.rollout_model,
                self.tokenizer,
                state,
                self.config.train.keep_checkpoints,
                staged=True,
                weights=weights,
            )
        self.ranks.barrier("checkpoint rename")
        self.last_checkpoint = ckpt.checkpoint_dir(self.output_dir) / f"{ckpt.PREFIX}{self.step:06d}"
        return self.last_checkpoint

    def _find_checkpoint(self) -> tuple[Path, dict[str, Any]] | None:
        found = super()._find_checkpoint()
        if found is not None:
            theirs = found[1].get("config", {}).get("model", {}).get("path")
            if theirs is not None and theirs != self.config.model.path:
                raise ckpt.CheckpointError(
                    f"checkpoint {found[0]} was trained from model {theirs}, but model.path is "
                    f"{self.config.model.path}; resume it with model.path={theirs}, or use another "
                    "train.output_dir to start over"
                )
        return found

    def _load_optimizer(self, path: Path, state: dict[str, Any]) -> None:
        if ckpt.is_sharded(state):
            load_sharded(path / ckpt.SHARDED_DIR, self.model, self.optimizer)
        else:  # a single-process checkpoint: the weights came from its folder, the optimizer by position
            names = [n for n, p in self.model.named_parameters() if p.requires_grad]
            load_plain_optimizer(self.model, self.optimizer, state["optimizer"], names)

    def _restore_rng(self, path: Path, state: dict[str, Any]) -> None:
        mine = path / RNG_DIR / f"rank_{self.rank:05d}.pt"
        if state.get("world_size") == self.ranks.world_size and mine.is_file():
            ckpt.set_rng_state(ckpt._safe_load(mine))
        elif self.ranks.is_main:
            ckpt.set_rng_state(state["rng"])
        else:  # another world size: a fresh stream per rank, the same on every resume
            seed = (self.config.train.seed + 7919 * int(state["step"]) + self.rank) % 2**32
            random.seed(seed)
            np.random.seed(seed)
            torch.manual_seed(seed)
