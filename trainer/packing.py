"""Packed sequences for the optimizer pass: no padded compute.

A packed micro-batch is one row of tokens holding several sequences back to back, at most
``budget`` tokens (a sequence longer than the budget gets a row of its own). Position ids restart
at 0 for every sequence and attention stays inside each sequence, so every token sees exactly what
it sees in the padded layout (``model.collate``): the logprobs match within float rounding.

Prompt sharing: the G rollouts of a group share one prompt. With an attention that takes a mask
(``attention.packed_kernel``: a dense tree mask for ``sdpa``/``eager``, a flex ``BlockMask`` for
``flex_attention``) the prompt is placed once and followed by its responses, each response
attending to the prompt and to itself only (a tree mask), so the prompt runs once per row, as in
the padded pass's shared-prompt path, and without its KV-cache copies. Kernels that take packing
only from position ids (flash-attention's varlen path) cannot express that mask: there every
sequence is its own segment with its prompt repeated, and transformers builds the varlen call from
the reset position ids (``share_prompts`` false).

The LM head runs only on the positions that predict response tokens (``logits_to_keep`` as an index
tensor), and the logprobs are scattered back into the ``[B, R]`` layout the losses take.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .attention import PackedKernel, packed_kernel, tree_block_mask
from .layout import PassSize
from .model import MicroBatch, accepts_logits_to_keep, collate, micro_batches, response_logits, token_logprobs
from .sequence import TrainSequence


@dataclass
class PackedBatch:
    """One packed row and the ``[B, R]`` response layout of its sequences (for the losses)."""

    input_ids: Tensor
    """``[1, L]``: the row."""
    position_ids: Tensor
    """``[1, L]``: restarting at 0 with each prompt."""
    attention_mask: Any
    """The tree when prompts are shared (a ``[1, 1, L, L]`` tensor, or a flex ``BlockMask``), else
    ``None`` (packing from position ids)."""
    keep: Tensor
    """``[N]``: the row positions whose logits predict the response tokens, sequence by sequence."""
    rows: Tensor
    cols: Tensor
    """``[N]`` each: where each predicted token goes in the ``[B, R]`` layout."""
    response_ids: Tensor
    response_mask: Tensor
    advantages: Tensor
    sequences: list[TrainSequence]

    @property
    def tokens(self) -> int:
        """Tokens the forward pass computes."""
        return int(self.input_ids.shape[1])


def share_prompts(model: Any) -> bool:
    """Whether ``model``'s packed rows hold each prompt once (a tree mask), not once per sequence."""
    return packed_kernel(model) != "varlen"


def _cost(sequences: Sequence[TrainSequence], indices: Sequence[int], share: bool) -> int:
    lengths = [len(sequences[i].response_ids) for i in indices]
    prompt = len(sequences[indices[0]].prompt_ids)
    return prompt + sum(lengths) if share else prompt * len(lengths) + sum(lengths)


def plan_packs(sequences: Sequence[TrainSequence], budget: int, share: bool) -> list[list[int]]:
    """The sequence indices of each packed row, deterministic.

    Sequences sharing a prompt are kept together (first-fit over the groups, longest first), and a
    group that does not fit in ``budget`` tokens is split into parts that each fit.
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(sequences):
        groups.setdefault(tuple(s.prompt_ids), []).append(i)
    parts: list[list[int]] = []
    for members in groups.values():
        part: list[int] = []
        for i in members:
            if part and _cost(sequences, [*part, i], share) > budget:
                parts.append(part)
                part = []
            part.append(i)
        parts.append(part)
    parts.sort(key=lambda p: (-_cost(sequences, p, share), p[0]))
    packs: list[list[int]] = []
    used: list[int] = []
    for part in parts:
        cost = _cost(sequences, part, share)
        for k, total in enumerate(used):
            if total + cost <= budget:
                packs[k].extend(part)
                used[k] += cost
                break
        else:
            packs.append(list(part))
            used.append(cost)
    return packs


def pack(
    sequences: list[TrainSequence], pad_id: int, device: torch.device, share: bool, mask: torch.dtype | None
) -> PackedBatch:
    """One row of ``sequences``; with ``share``, each distinct prompt once under a tree mask: dense of
    dtype ``mask``, or a flex ``BlockMask`` when ``mask`` is ``None``."""
    ids: list[int] = []
    pos: list[int] = []
    seg: list[int] = []  # the segment (prompt or sequence) each token belongs to
    owner: list[int] = []  # -1 on a shared prompt, else the sequence of a response token
    keep: list[int] = []
    rows: list[int] = []
    cols: list[int] = []
    prompt_end: dict[tuple[int, ...], tuple[int, int]] = {}  # prompt -> (its last index, its segment)
    for b, s in enumerate(sequences):
        key = tuple(s.prompt_ids)
        if not share or key not in prompt_end:
            segment = len(prompt_end) if share else b
            ids += s.prompt_ids
            pos += range(len(s.prompt_ids))
            seg += [segment] * len(s.prompt_ids)
            owner += [-1] * len(s.prompt_ids)
            prompt_end[key] = (len(ids) - 1, segment)
        last, segment = prompt_end[key]
        start = len(ids)
        ids += s.response_ids
        pos += range(len(s.prompt_ids), len(s.prompt_ids) + len(s.response_ids))
        seg += [segment] * len(s.response_ids)
        owner += [b] * len(s.response_ids)
        if s.response_ids:
            keep += [last, *range(start, start + len(s.response_ids) - 1)]
        rows += [b] * len(s.response_ids)
        cols += range(len(s.response_ids))
    r = max(max(len(s.response_ids) for s in sequences), 1)
    tree: Any = None
    if share and mask is not None:
        tree = _tree_mask(torch.tensor(seg), torch.tensor(owner), mask).to(device)
    elif share:
        tree = tree_block_mask(torch.tensor(seg, device=device), torch.tensor(owner, device=device))
    return PackedBatch(
        input_ids=torch.tensor([ids], dtype=torch.long, device=device),
        position_ids=torch.tensor([pos], dtype=torch.long, device=device),
        attention_mask=tree,
        keep=torch.tensor(keep, dtype=torch.long, device=device),
        rows=torch.tensor(rows, dtype=torch.long, device=device),
        cols=torch.tensor(cols, dtype=torch.long, device=device),
        response_ids=torch.tensor(
            [s.response_ids + [pad_id] * (r - len(s.response_ids)) for s in sequences],
            dtype=torch.long,
            device=device,
        ),
        response_mask=torch.tensor(
            [
                list(s.loss_mask or [1] * len(s.response_ids)) + [0] * (r - len(s.response_ids))
                for s in sequences
            ],
            dtype=torch.float32,
            device=device,
        ),
        advantages=torch.tensor([s.advantage for s in sequences], dtype=torch.float32, device=device),
        sequences=sequences,
    )


def _tree_mask(seg: Tensor, owner: Tensor, dtype: torch.dtype) -> Tensor:
    """``[1, 1, L, L]``: token i sees j <= i of its segment, on the prompt or in its own response.

    Boolean (True: attend) for ``dtype=torch.bool`` (sdpa), else additive (0 or the dtype's min, eager).
    """
    n = seg.shape[0]
    i, j = torch.arange(n).unsqueeze(1), torch.arange(n).unsqueeze(0)
    visible = (j <= i) & (seg.unsqueeze(1) == seg.unsqueeze(0))
    visible &= (owner.unsqueeze(0) == -1) | (owner.unsqueeze(0) == owner.unsqueeze(1))
    visible = visible[None, None]
    if dtype == torch.bool:
        return visible
    return torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)


def packed_logits(model: Any, pb: PackedBatch) -> Tensor:
    """``[N, V]``: the logits at ``pb.keep`` (each predicts one response token), in order."""
    kwargs: dict[str, Any] = {"logits_to_keep": pb.keep} if accepts_logits_to_keep(model) else {}
    out = model(
        input_ids=pb.input_ids,
        attention_mask=pb.attention_mask,
        position_ids=pb.position_ids,
        use_cache=False,
        **kwargs,
    )
    return out.logits[0] if kwargs else out.logits[0, pb.keep]


def packed_token_logprobs(pb: PackedBatch, logits: Tensor) -> tuple[Tensor, Tensor]:
    """Logprobs and entropies ``[B, R]`` of the response tokens from ``packed_logits`` (0 on padding)."""
    targets = pb.response_ids[pb.rows, pb.cols]
    logp, entropy = token_logprobs(logits.unsqueeze(1), targets.unsqueeze(1), entropy=True)
    shaped = []
    for values in (logp, entropy):
        full = values.new_zeros(pb.response_ids.shape)
        shaped.append(full.index_put((pb.rows, pb.cols), values.squeeze(1)))
    return shaped[0], shaped[1]


def packed_tokens(sequences: Sequence[TrainSequence], packs: Sequence[Sequence[int]], share: bool) -> int:
    """Tokens the packed rows ``packs`` hold."""
    total = 0
    for pack_ in packs:
        groups: dict[tuple[int, ...], list[int]] = {}
        for i in pack_:
            groups.setdefault(tuple(sequences[i].prompt_ids), []).append(i)
        total += sum(_cost(sequences, members, share) for members in groups.values())
    return total


def padded_tokens(sequences: Sequence[TrainSequence], parts: Sequence[Sequence[int]]) -> int:
    """Tokens the padded layout (``model.collate``) computes for micro-batches ``parts``."""
    total = 0
    for part in parts:
        p = max(len(sequences[i].prompt_ids) for i in part)
        r = max(max(len(sequences[i].response_ids) for i in part), 1)
        total += len(part) * (p + r)
    return total


def plan_passes(
    sequences: Sequence[TrainSequence], packing: bool, size: PassSize, share: bool
) -> list[list[int]]:
    """The sequence indices of each forward/backward pass: packed rows, or padded micro-batches."""
    if packing:
        return plan_packs(sequences, size.tokens, share)
    return micro_batches(sequences, size.sequences, None if size.sequences else size.tokens)


def mask_kind(model: Any) -> torch.dtype | None:
    """What ``pack`` builds the tree as for ``model``: ``None`` for a flex block mask, else the dense
    mask's dtype (boolean for sdpa, additive in the weights' dtype for eager)."""
    kernel: PackedKernel = packed_kernel(model)
    if kernel == "flex":
        return None
    return torch.bool if model.config._attn_implementation == "sdpa" else next(model.parameters()).dtype


def make_pass(
    rows: list[TrainSequence], pad_id: int, model: Any, packing: bool, share: bool
) -> MicroBatch | PackedBatch:
    """The tensors of one pass over ``rows``, on the model's device."""
    device = next(model.parameters()).device
    if packing:
        return pack(rows, pad_id, device, share, mask_kind(model))
    return collate(rows, pad_id, device)


def pass_logprobs(
    model: Any, mb: MicroBatch | PackedBatch, temperature: float, autocast: AbstractContextManager[Any]
) -> tuple[Tensor, Tensor]:
    """Logprobs and entropies ``[B, R]`` of ``mb``'s response tokens under ``logits / temperature``."""
    with autocast:
        logits = packed_logits(model, mb) if isinstance(mb, PackedBatch) else response_logits(model, mb)
    if temperature != 1.0:
        logits = logits / temperature
    if isinstance(mb, PackedBatch):
        return packed_token_logprobs(mb, logits)
    logp, entropy = token_logprobs(logits, mb.response_ids, entropy=True)
    return logp, entropy


def layout_metrics(sequences: Sequence[TrainSequence], size: PassSize, share: bool) -> dict[str, float]:
    """Tokens per step of the padded layout and of the packed one (whichever the step ran)."""
    padded = padded_tokens(
        sequences, micro_batches(sequences, size.sequences, None if size.sequences else size.tokens)
    )
    packed = packed_tokens(sequences, plan_packs(sequences, size.tokens, share), share)
    return {"train/padded_tokens": float(padded), "train/packed_tokens": float(packed)}
