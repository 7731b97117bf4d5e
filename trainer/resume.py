"""Checkpoints and resuming, for the ``Trainer``: writing a step's checkpoint, finding and loading the
newest readable one, and starting over (``train.resume: false``) without mixing with an earlier run.

``Checkpointing`` is a base of ``Trainer``; a sharded run (``trainer/parallel/trainer.py``) overrides
where its shards and per-rank RNG states differ.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from ..core import CascadeError
from . import checkpoint as ckpt
from .config import Config

log = logging.getLogger("cascade_envs.trainer")


class TrainingError(CascadeError):
    """Training cannot go on (e.g. a NaN loss); the message says what to do."""


class Checkpointing:
    """Checkpoint writing and resuming of a ``Trainer`` (which sets the attributes annotated here)."""

    config: Config
    output_dir: Path
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    mix: Any
    builder: Any
    logger: Any
    step: int
    last_checkpoint: Path | None
    resumed_from: Path | None

    def _start_fresh(self) -> None:
        """``train.resume: false``: an earlier run's records in ``output_dir`` are set aside, never appended to."""
        moved = ckpt.set_aside_earlier_run(self.output_dir)
        if moved is not None:
            log.warning(
                "train.resume is false: the earlier run in %s was moved to %s", self.output_dir, moved
            )

    def _load_optimizer(self, path: Path, state: dict[str, Any]) -> None:
        if ckpt.is_sharded(state):  # written by a sharded run: the optimizer state is in its shards
            from .parallel.dcp import load_unsharded

            load_unsharded(path / ckpt.SHARDED_DIR, self.model, self.optimizer)
        else:
            self.optimizer.load_state_dict(state["optimizer"])

    def _restore_rng(self, path: Path, state: dict[str, Any]) -> None:
        ckpt.set_rng_state(state["rng"])

    def _find_checkpoint(self) -> tuple[Path, dict[str, Any]] | None:
        """The newest readable checkpoint and its state; unreadable ones are skipped with a warning."""
        unreadable: list[str] = []
        for path in reversed(ckpt.list_checkpoints(self.output_dir)):
            try:
                return path, ckpt.load_state(path)
            except ckpt.CheckpointError as exc:
                log.warning("%s; trying the previous checkpoint", exc)
                unreadable.append(str(path))
        if unreadable:
            raise ckpt.CheckpointError(
                f"no readable checkpoint to resume from in {ckpt.checkpoint_dir(self.output_dir)} "
                f"(unreadable: {', '.join(unreadable)}); move them away, or set train.resume=false to start over "
                "(the earlier run is then moved to earlier_runs/)"
            )
        return None

    def _restore(self, path: Path, state: dict[str, Any]) -> None:
        self._load_optimizer(path, state)
        self.mix.load_state_dict(state["mix"])
        if "batch" in state:  # checkpoints written before adaptive oversampling have no keep-rate estimate
            self.builder.load_state_dict(state["batch"])
        self.step = int(state["step"])
        self._restore_rng(path, state)
        self.logger.truncate_after(self.step)
        self.last_checkpoint = self.resumed_from = path
        log.info("resumed from step %d (%s)", self.step, path)

    def save(self) -> Path:
        """Write a checkpoint of the current step; refuses weights that are no longer finite."""
        bad = next(
            (name for name, p in self.model.named_parameters() if not bool(torch.isfinite(p).all())), None
        )
        if bad is not None:
            where = (
                f"the last good checkpoint is {self.last_checkpoint}"
                if self.last_checkpoint
                else "none was written"
            )
            raise TrainingError(
                f"step {self.step}: weight {bad} is not finite, so no checkpoint was written ({where}). "
                "Lower optim.lr, or use float32 (model.dtype=float32)."
            )
        state = {
            "optimizer": self.optimizer.state_dict(),
            "mix": self.mix.state_dict(),
            "batch": self.builder.state_dict(),
            "config": self.config.to_dict(),
        }
        self.last_checkpoint = ckpt.save_checkpoint(
            self.output_dir, self.step, self.model, self.tokenizer, state, self.config.train.keep_checkpoints
        )
        return self.last_checkpoint


def load_weights(model: Any, path: Path) -> None:
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(
        path, dtype=next(model.parameters()).dtype, use_safetensors=True
    )
    model.load_state_dict(loaded.state_dict())
