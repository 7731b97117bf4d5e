"""Packed sequences: the packed pass gives the padded pass's logprobs, entropies and gradients."""

from __future__ import annotations

import json

import pytest
import torch

from cascade_envs.trainer.loop import Trainer
from cascade_envs.trainer.model import _full_logits, collate, response_logits, token_logprobs
from cascade_envs.trainer.packing import (
    pack,
    packed_logits,
    packed_token_logprobs,
    packed_tokens,
    padded_tokens,
    plan_packs,
    share_prompts,
)
from cascade_envs.trainer.sequence import TrainSequence
from tests.trainer.toys import tiny_model, tiny_tokenizer

TOL = 1e-5
"""float32 on CPU: the packed and padded passes differ only in summation order (measured ~1e-6)."""

A, B = [1, 4, 15, 6, 2, 1, 5], [1, 4, 6, 2, 1, 5]


def sequences() -> list[TrainSequence]:
    return [
        TrainSequence(A, [9, 10, 2], 1.0, "e"),
        TrainSequence(B, [11, 12, 13, 2], 0.5, "e"),
        TrainSequence(A, [9], -1.0, "e"),
        TrainSequence(B, [11, 2], 0.5, "e"),
        TrainSequence(B, [], 0.5, "e"),
        # a multi-turn episode: the tool turn's tokens (loss mask 0) stay visible to the later turn
        TrainSequence(
            B, [11, 2, 1, 7, 8, 2, 1, 5, 12, 2], 0.5, "e", loss_mask=[1, 1, 0, 0, 0, 0, 0, 0, 1, 1]
        ),
        TrainSequence([1, 3, 5, 7, 9, 11, 13, 2, 1, 5], [14, 15, 2], -0.5, "e"),
    ]


def model_with(attention: str):
    tok = tiny_tokenizer()
    model = tiny_model(len(tok)).train()
    model.config._attn_implementation = attention
    return model


def padded_pass(model, seqs, forward=_full_logits):
    mb = collate(seqs, pad_id=0, device=torch.device("cpu"))
    logp, entropy = token_logprobs(forward(model, mb), mb.response_ids, entropy=True)
    (logp * mb.response_mask).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return mb.response_mask, logp.detach() * mb.response_mask, entropy * mb.response_mask, grads


def packed_pass(model, seqs, share):
    dtype = torch.bool if model.config._attn_implementation == "sdpa" else torch.float32
    pb = pack(seqs, 0, torch.device("cpu"), share, dtype)
    logp, entropy = packed_token_logprobs(pb, packed_logits(model, pb))
    (logp * pb.response_mask).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return pb, logp.detach() * pb.response_mask, entropy * pb.response_mask, grads


@pytest.mark.parametrize(
    ("attention", "share"),
    [("sdpa", True), ("eager", True), ("sdpa", False), ("eager", False)],
    ids=["sdpa-tree", "eager-tree", "sdpa-position-ids", "eager-position-ids"],
)
def test_packed_pass_matches_the_padded_pass(attention, share):
    """Logprobs, entropies and gradients, incl. a multi-turn sequence with masked tool turns, an
    empty response, and sequences of one group interleaved with another's."""
    model = model_with(attention)
    seqs = sequences()
    mask, logp, entropy, grads = padded_pass(model, seqs)
    pb, plogp, pentropy, pgrads = packed_pass(model, seqs, share)
    assert torch.equal(pb.response_mask, mask)
    assert (logp != 0).sum() > 10  # real values are compared, not zeros
    assert torch.allclose(plogp, logp, atol=TOL)
    assert torch.allclose(pentropy, entropy, atol=TOL)
    assert all(torch.allclose(x, y, atol=TOL) for x, y in zip(grads, pgrads, strict=True))
    # each distinct prompt is in the row once when shared, once per sequence otherwise
    prompt_tokens = len(A) + len(B) + 10 if share else sum(len(s.prompt_ids) for s in seqs)
    assert pb.tokens == prompt_tokens + sum(len(s.response_ids) for s in seqs)


def test_packed_pass_matches_the_shared_prompt_padded_pass():
    """The padded pass's shared-prompt path (one prompt forward, KV cache per response) agrees too."""
    model = model_with("sdpa")
    seqs = sequences()
    _, logp, _, grads = padded_pass(model, seqs, forward=response_logits)
    _, plogp, _, pgrads = packed_pass(model, seqs, share=True)
    assert torch.allclose(plogp, logp, atol=TOL)
    assert all(torch.allclose(x, y, atol=TOL) for x, y in zip(grads, pgrads, strict=True))


def test_responses_in_a_row_do_not_see_each_other():
    model = model_with("sdpa").eval()
    seqs = [TrainSequence(A, [9, 10, 2], 1.0, "e"), TrainSequence(A, [11, 12, 13, 2], 0.5, "e")]
    _, before, _, _ = packed_pass(model, seqs, share=True)
    # the first response changes; the second, after it in the row, must not notice
    _, after, _, _ = packed_pass(model, [TrainSequence(A, [3, 7, 2], 1.0, "e"), seqs[1]], share=True)
    assert not torch.equal(before[0], after[0])
    assert torch.equal(before[1], after[1])


def test_only_sdpa_and_eager_without_sliding_windows_share_prompts():
    assert share_prompts(model_with("sdpa")) and share_prompts(model_with("eager"))
    assert not share_prompts(model_with("flash_attention_2"))
    windowed = model_with("sdpa")
    windowed.config.sliding_window = 4096  # a given 4D mask would drop the window: packed from position ids
    assert not share_prompts(windowed)


@pytest.mark.parametrize("share", [True, False])
def test_plan_keeps_groups_together_within_the_budget(share):
    seqs = [TrainSequence([1] * 10, [5] * 6, 0.0, "e") for _ in range(8)]
    seqs += [TrainSequence([2] * 12, [5] * n, 0.0, "e") for n in (3, 4, 5, 6)]
    seqs.append(TrainSequence([3] * 40, [5] * 30, 0.0, "e"))  # over the budget: a row of its own
    packs = plan_packs(seqs, 48, share)
    assert sorted(i for p in packs for i in p) == list(range(len(seqs)))
    assert packs == plan_packs(seqs, 48, share)  # deterministic
    for p in packs:
        cost = packed_tokens(seqs, [p], share)
        assert cost <= 48 or p == [12]
    if share:  # the whole second group (12 + 18 tokens) fits one row
        assert any({8, 9, 10, 11} <= set(p) for p in packs)
    assert packed_tokens(seqs, packs, share) < padded_tokens(seqs, [list(range(len(seqs)))])


def test_packing_gives_the_padded_update_and_logs_both_layouts(make_config, tmp_path):
    """One optimizer step packed and padded: same update (float tolerance) and same loss."""
    runs = []
    for name, packing in (("packed", True), ("padded", False)):
        trainer = Trainer(
            make_config(
                optim={"micro_batch_size": 5},
                train={"packing": packing, "pack_tokens": 64, "output_dir": str(tmp_path / name)},
            )
        )
        runs.append((trainer, trainer.train_step()))
    (packed, mp), (padded, md) = runs
    assert mp["reward/mean"] == md["reward/mean"]
    assert mp["train/loss"] == pytest.approx(md["train/loss"], abs=1e-6)
    assert mp["train/entropy"] == pytest.approx(md["train/entropy"], rel=1e-5)
    assert mp["train/grad_norm"] == pytest.approx(md["train/grad_norm"], rel=1e-5)
    for a, b in zip(packed.model.parameters(), padded.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    assert mp["train/packed_tokens"] == md["train/packed_tokens"] < mp["train/padded_tokens"]
    logged = json.loads(packed.logger.path.read_text().splitlines()[0])
    assert logged["train/packed_tokens"] == mp["train/packed_tokens"]


def test_two_runs_log_identical_metrics(make_config, tmp_path):
    """A run repeats exactly on one machine: same metrics (all but timings) and same weights."""
    runs = []
    for name in ("a", "b"):
        trainer = Trainer(make_config(train={"steps": 3, "output_dir": str(tmp_path / name)}))
        runs.append((trainer, trainer.train()))
    drop = ("time/", "throughput/")
    (ta, ha), (tb, hb) = runs
    strip = [[{k: v for k, v in h.items() if not k.startswith(drop)} for h in hist] for hist in (ha, hb)]
    assert len(strip[0]) == 3 and strip[0] == strip[1]
    assert any(not h.get("skipped") for h in ha)
    for a, b in zip(ta.model.state_dict().values(), tb.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
