"""Checkpoints: a loadable Hugging Face model folder plus the trainer state to resume from.

``output_dir/checkpoints/step_000010/`` holds the model and tokenizer (``save_pretrained``) and
``trainer_state.pt``: optimizer state, step, every RNG state (Python, NumPy, torch, CUDA) and the
env-mix sampler, so a resumed run continues exactly where it stopped. A checkpoint is written to a
temporary folder and renamed into place, so a crash never leaves a half-written "latest".
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
PREFIX = "step_"


def checkpoint_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = checkpoint_dir(output_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    output_dir: str | Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any], keep: int
) -> Path:
    """Write the checkpoint of ``step`` and delete all but the newest ``keep``."""
    root = checkpoint_dir(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp_{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save({**state, "step": step, "rng": rng_state()}, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in list_checkpoints(output_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_state(path: str | Path) -> dict[str, Any]:
    """The trainer state of a checkpoint folder (RNG states are restored by the caller)."""
    return torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=False)
