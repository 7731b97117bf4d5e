"""Checkpoints: a loadable Hugging Face model folder plus the trainer state to resume from.

``output_dir/checkpoints/step_000010/`` holds the model and tokenizer (``save_pretrained``, weights as
safetensors) and ``trainer_state.pt``: optimizer state, step, every RNG state (Python, NumPy, torch,
CUDA) and the env-mix sampler, so a resumed run continues exactly where it stopped. A checkpoint is
written to a temporary folder and renamed into place, so a crash never leaves a half-written "latest".

Reading one executes nothing: the state is loaded with ``torch.load(weights_only=True)`` (tensors
and plain Python values only) and the weights only from safetensors files, whose headers and sizes
are checked first, so a truncated or tampered checkpoint is reported, with its path, as unreadable.
Only folders named ``step_NNNNNN`` count as checkpoints.

A sharded run (``trainer/parallel``) writes the same folder (its weights consolidated, so it stays a
loadable Hugging Face model) plus ``dcp/`` (model and optimizer shards, ``torch.distributed.checkpoint``)
and ``rng/rank_NNNNN.pt``; its trainer state then holds ``SHARDED_OPTIMIZER`` instead of the optimizer.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core import CascadeError

STATE_FILE = "trainer_state.pt"
PREFIX = "step_"
NAME = re.compile(r"step_(\d+)")
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
SHARDED_DIR = "dcp"
SHARDED_OPTIMIZER = {"sharded": SHARDED_DIR}
"""The trainer state's ``optimizer`` when the optimizer state is in the checkpoint's ``dcp/`` folder."""


class CheckpointError(CascadeError):
    """A checkpoint that cannot be read (truncated, corrupt, or not written by this trainer)."""


def checkpoint_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def checkpoint_step(path: str | Path) -> int | None:
    """The step of a ``step_NNNNNN`` folder; ``None`` for any other name."""
    match = NAME.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints (``step_NNNNNN`` folders holding a trainer state), oldest first."""
    root = checkpoint_dir(output_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if checkpoint_step(p) is not None and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: (checkpoint_step(p), p.name))


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


RUN_RECORDS = (
    "checkpoints",
    "metrics.jsonl",
    "rollouts.jsonl",
    "heldout.json",
    "rewards.png",
    "tensorboard",
    "ranks",
)
"""What a run writes into its ``output_dir`` (``set_aside_earlier_run`` moves them)."""
EARLIER_RUNS = "earlier_runs"


def set_aside_earlier_run(output_dir: str | Path) -> Path | None:
    """Move an earlier run's records out of ``output_dir`` into ``earlier_runs/run_N/`` (nothing is
    deleted), so a run that starts over neither appends to its metrics nor mixes its checkpoints
    with the earlier ones; the folder they went to, or ``None`` when there were none."""
    root = Path(output_dir)
    found = [root / name for name in RUN_RECORDS if (root / name).exists()]
    if not found:
        return None
    n = 1 + sum(1 for _ in (root / EARLIER_RUNS).glob("run_*")) if (root / EARLIER_RUNS).is_dir() else 1
    target = root / EARLIER_RUNS / f"run_{n}"
    while target.exists():
        n += 1
        target = root / EARLIER_RUNS / f"run_{n}"
    target.mkdir(parents=True)
    for path in found:
        path.rename(target / path.name)
    return target


def rng_state() -> dict[str, Any]:
    """Every RNG state, as tensors and plain Python values (loadable with ``weights_only=True``)."""
    numpy_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            **numpy_state,
            "state": {"key": numpy_state["state"]["key"].tolist(), "pos": int(numpy_state["state"]["pos"])},
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
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


def is_sharded(state: dict[str, Any]) -> bool:
    return state.get("optimizer") == SHARDED_OPTIMIZER


def staging_dir(output_dir: str | Path, step: int) -> Path:
    """Where the checkpoint of ``step`` is written before it is renamed into place."""
    return checkpoint_dir(output_dir) / f".tmp_{PREFIX}{step:06d}"


def save_checkpoint(
    output_dir: str | Path,
    step: int,
    model: Any,
    tokenizer: Any,
    state: dict[str, Any],
    keep: int,
    *,
    staged: bool = False,
    weights: dict[str, Any] | None = None,
) -> Path:
    """Write the checkpoint of ``step`` and delete all but the newest ``keep``; with ``staged`` the
    staging folder already holds files (a sharded run's shards) that become part of it. ``weights``
    (full tensors by name) are saved in place of ``model``'s own (a sharded model's, gathered)."""
    root = checkpoint_dir(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = staging_dir(output_dir, step)
    if not staged:
        shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=weights)  # safetensors (the default since transformers 4.35)
    tokenizer.save_pretrained(tmp)
    torch.save({**state, "step": step, "rng": rng_state()}, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in list_checkpoints(output_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _check_safetensors(file: Path) -> None:
    """The header parses and the file is as long as the header says (a truncated file is not)."""
    size = file.stat().st_size
    with file.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{file.name} is truncated ({size} bytes)")
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            raise ValueError(f"{file.name} is truncated (header of {length} bytes in a file of {size})")
        header = json.loads(f.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"{file.name} has no tensor table")
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + length + end != size:
        what = "truncated" if size < 8 + length + end else "longer than its header says"
        raise ValueError(f"{file.name} is {what}: {size} bytes, its header describes {8 + length + end}")


def check_weights(path: str | Path) -> None:
    """The checkpoint's weights are complete safetensors files; ``ValueError``/``OSError`` if not."""
    folder = Path(path)
    if (folder / WEIGHTS).is_file():
        _check_safetensors(folder / WEIGHTS)
        return
    if (folder / WEIGHTS_INDEX).is_file():
        index = json.loads((folder / WEIGHTS_INDEX).read_text(encoding="utf-8"))
        for shard in sorted(set(index["weight_map"].values())):
            if Path(shard).name != shard:
                raise ValueError(f"{WEIGHTS_INDEX} names a shard outside the folder: {shard!r}")
            _check_safetensors(folder / shard)
        return
    raise ValueError(f"no {WEIGHTS} (weights are read from safetensors only)")


def _numpy_globals() -> list[Any]:
    """What a NumPy RNG state pickled by earlier versions of this trainer needs: arrays and dtypes only."""
    multiarray = getattr(getattr(np, "_core", None), "multiarray", None) or getattr(np, "core").multiarray  # noqa: B009 - NumPy < 2 has no _core
    return [multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def _safe_load(file: Path) -> Any:
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    if safe_globals is None:  # torch 2.4
        torch.serialization.add_safe_globals(_numpy_globals())
        return torch.load(file, map_location="cpu", weights_only=True)
    with safe_globals(_numpy_globals()):
        return torch.load(file, map_location="cpu", weights_only=True)


def load_state(path: str | Path) -> dict[str, Any]:
    """The trainer state of a checkpoint folder, after checking its weights are complete.

    RNG states are restored by the caller. Raises ``CheckpointError`` naming the folder when
    anything is missing, truncated or not plain data.
    """
    folder = Path(path)
    try:
        check_weights(folder)
        state = _safe_load(folder / STATE_FILE)
        if not isinstance(state, dict):
            raise ValueError(f"{STATE_FILE} holds a {type(state).__name__}, not a trainer state")
        missing = [k for k in ("optimizer", "mix", "step", "rng") if k not in state]
        if missing:
            raise ValueError(f"{STATE_FILE} lacks {', '.join(missing)}")
        if not isinstance(state["step"], int) or state["step"] < 0:
            raise ValueError(f"{STATE_FILE} has step {state['step']!r}")
    except Exception as exc:  # torch.load raises anything from EOFError to UnpicklingError
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "no detail"
        raise CheckpointError(f"checkpoint {folder} is unreadable: {type(exc).__name__}: {reason}") from exc
    return state
