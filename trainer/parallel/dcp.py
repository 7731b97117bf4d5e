"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP): model and optimizer shards.

DCP stores each tensor by its fully qualified name with its sharding, so a checkpoint written by N
ranks loads on M ranks, and on a single unsharded process (``load_unsharded``, no process group).
The consolidated Hugging Face weights beside the shards are written by the trainer (``trainer.py``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_optimizer_state_dict,
    set_state_dict,
)

from ...core import CascadeError


def save_sharded(folder: Path, model: Any, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its shards of the model and optimizer into ``folder`` (a collective)."""
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(folder))


def _load(folder: Path, model: Any, optimizer: torch.optim.Optimizer) -> None:
    model_state, optim_state = get_state_dict(model, optimizer)  # allocates the optimizer state to load into
    try:
        dcp.load({"model": model_state, "optim": optim_state}, checkpoint_id=str(folder))  # in place
    except Exception as exc:  # DCP raises CheckpointException / RuntimeError with every rank's traceback
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise CascadeError(
            f"checkpoint {folder.parent} does not fit this model ({first}); it was written for another model, "
            "so point model.path at the model it was trained from or use another output_dir"
        ) from exc
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state)


def load_sharded(folder: Path, model: Any, optimizer: torch.optim.Optimizer) -> None:
    """Load shards written at any world size into the sharded ``model`` and its optimizer (a collective)."""
    _load(folder, model, optimizer)


def load_unsharded(folder: Path, model: Any, optimizer: torch.optim.Optimizer) -> None:
    """Load a sharded checkpoint into a plain single-process model and optimizer (no process group)."""
    with warnings.catch_warnings():  # DCP says it assumes a single process: it is one
        warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process")
        _load(folder, model, optimizer)


def load_plain_optimizer(
    model: Any, optimizer: torch.optim.Optimizer, plain: dict[str, Any], names: list[str]
) -> None:
    """Load a single-process optimizer state (parameters by position, ``names`` in that order) into the
    sharded model's optimizer: each rank keeps its shard."""
    state = {names[int(i)]: value for i, value in plain["state"].items()}
    groups = [{**g, "params": [names[int(i)] for i in g["params"]]} for g in plain["param_groups"]]
    set_optimizer_state_dict(
        model,
        optimizer,
        {"state": state, "param_groups": groups},
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=False),
    )
