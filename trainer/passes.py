"""The optimizer step's passes: their tensors, built ahead on a GPU, and their metric sums, kept on the device.

A pass that reads a number back from the GPU (``loss.item()``) or copies a host tensor to it waits
for every kernel queued before it, so the GPU idles between passes. Here each pass's inputs are
built before the first forward on a GPU (``build_passes``; the copies then overlap nothing and wait
for nothing), and the metric sums stay on the device until the step ends (``DeviceSums``: one read).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

from .model import MicroBatch
from .packing import PackedBatch, make_pass
from .sequence import TokenScores, TrainSequence
from .sources import source_tensors
from .strategies import SourceTensors

Pass = tuple[MicroBatch | PackedBatch, list[TrainSequence], dict[str, SourceTensors]]
"""One pass: its batch, its sequences, and each log-prob source's tensors for them."""


def build_passes(
    sequences: list[TrainSequence],
    scores: dict[str, list[TokenScores]],
    plan: list[list[int]],
    model: Any,
    pad_id: int,
    packed: bool,
    share: bool,
) -> Iterable[Pass | None]:
    """Each planned pass's tensors (``None`` for an empty part: an idle pass), in order: all built up
    front on a GPU, one at a time elsewhere (a CPU row's dense tree mask is large)."""
    device = next(model.parameters()).device

    def build(part: list[int]) -> Pass | None:
        if not part:
            return None
        rows = [sequences[i] for i in part]
        mb = make_pass(rows, pad_id, model, packed, share)
        width = mb.response_ids.shape[1]
        tensors = {
            name: source_tensors([scores[name][i] for i in part], rows, width, device) for name in scores
        }
        return mb, rows, tensors

    built = map(build, plan)
    return list(built) if device.type == "cuda" else built


def logprob_mismatch(logp: Tensor, mask: Tensor, inference: SourceTensors) -> tuple[Tensor, Tensor]:
    """Sum and count of |train logp - inference logp| over trained tokens the engine reported logprobs for."""
    keep = mask.bool() & torch.isfinite(inference.logp)
    diff = torch.where(keep, (logp - inference.logp).abs(), torch.zeros((), device=logp.device))
    return diff.sum(), keep.sum()


class DeviceSums:
    """Metric sums of a step's passes, kept where they are computed (tensors on the device, or floats)
    until ``floats`` reads them all at once."""

    def __init__(self) -> None:
        self.values: dict[str, float | Tensor] = {}

    def add(self, values: Mapping[str, float | Tensor]) -> None:
        for key, value in values.items():
            self.values[key] = self.values.get(key, 0.0) + value

    def floats(self) -> dict[str, float]:
        tensors = {k: v for k, v in self.values.items() if isinstance(v, Tensor)}
        read = torch.stack([v.detach().float() for v in tensors.values()]).tolist() if tensors else []
        out = {k: float(v) for k, v in self.values.items() if not isinstance(v, Tensor)}
        return {**out, **dict(zip(tensors, read, strict=True))}
