"""The pass layout per device: flex packed rows, pass sizes, and the layout ``train.packing: auto`` picks."""

from __future__ import annotations

import logging

import pytest
import torch
from torch.nn.attention.flex_attention import BlockMask

from cascade_envs.trainer.attention import FLEX, packed_kernel, use_flex
from cascade_envs.trainer.layout import (
    MAX_PASS_TOKENS,
    MIN_PASS_TOKENS,
    PassSize,
    budget_tokens,
    decide,
    fused,
    pass_size,
    time_per_token,
)
from cascade_envs.trainer.loop import Trainer
from cascade_envs.trainer.model import _full_logits, collate, micro_batches, token_logprobs
from cascade_envs.trainer.packing import pack, packed_logits, packed_token_logprobs
from cascade_envs.trainer.sequence import TrainSequence
from tests.trainer.test_packing import TOL, model_with, padded_pass, sequences

CPU = torch.device("cpu")


def flex_model():
    model = model_with("sdpa")
    use_flex(model)
    return model


def test_flex_packed_rows_give_the_padded_logprobs():
    """The shared-prompt tree as a flex block mask (eager flex on CPU: forward only, torch has no CPU
    backward for it), incl. a multi-turn sequence with masked tool turns and an empty response."""
    model = flex_model().eval()
    seqs = sequences()
    with torch.no_grad():
        mb = collate(seqs, 0, CPU)
        logp, entropy = token_logprobs(_full_logits(model, mb), mb.response_ids, entropy=True)
        pb = pack(seqs, 0, CPU, True, None)
        plogp, pentropy = packed_token_logprobs(pb, packed_logits(model, pb))
    assert isinstance(pb.attention_mask, BlockMask) and packed_kernel(model) == "flex" and fused(model)
    assert (logp * mb.response_mask != 0).sum() > 10
    assert torch.allclose(plogp * pb.response_mask, logp * mb.response_mask, atol=TOL)
    assert torch.allclose(pentropy * pb.response_mask, entropy * mb.response_mask, atol=TOL)


def test_the_flex_implementation_runs_sdpa_for_every_other_pass():
    """Padded passes (and generation) of a flex model are sdpa's: same logprobs and gradients, exactly."""
    seqs = sequences()
    flex, sdpa = flex_model(), model_with("sdpa")
    assert flex.config._attn_implementation == FLEX
    _, logp, _, grads = padded_pass(flex, seqs)
    _, ref_logp, _, ref_grads = padded_pass(sdpa, seqs)
    assert torch.equal(logp, ref_logp)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads, strict=True))


def test_pass_sizes_on_cpu_and_as_set():
    model = model_with("sdpa")
    assert pass_size("auto", "auto", model) == PassSize(1024, 8)
    assert pass_size(64, 3, model) == PassSize(64, 3)
    assert pass_size(96, "auto", model) == PassSize(96, 8)


def test_the_gpu_budget_grows_with_free_memory_within_its_bounds():
    model = model_with("sdpa")
    small, large = budget_tokens(model, 2**20), budget_tokens(model, 2**40)
    assert (small, large) == (MIN_PASS_TOKENS, MAX_PASS_TOKENS)
    middle = budget_tokens(model, 2**30)
    assert MIN_PASS_TOKENS <= middle <= MAX_PASS_TOKENS and budget_tokens(model, 2**31) >= middle


def test_padded_micro_batches_by_count_or_by_padded_tokens():
    lengths = [(3, 5), (4, 4), (10, 30), (2, 2), (5, 6), (4, 9)]
    seqs = [TrainSequence([1] * p, [2] * r, 0.0, "e") for p, r in lengths]
    order = sorted(range(len(seqs)), key=lambda i: (sum(lengths[i]), i))
    assert micro_batches(seqs, 2) == [order[0:2], order[2:4], order[4:6]]  # by count, as before
    parts = micro_batches(seqs, None, 40)
    assert (
        sorted(i for p in parts for i in p) == list(range(len(seqs)))
        and [i for p in parts for i in p] == order
    )
    for part in parts:
        padded = len(part) * (max(lengths[i][0] for i in part) + max(lengths[i][1] for i in part))
        assert padded <= 40 or len(part) == 1
    assert [2] in parts  # 40 tokens alone: a micro-batch of its own
    for part in micro_batches(seqs, 2, 40):  # both limits
        padded = len(part) * (max(lengths[i][0] for i in part) + max(lengths[i][1] for i in part))
        assert len(part) <= 2 and (padded <= 40 or len(part) == 1)


def test_the_faster_layout_is_kept_and_one_that_fails_is_left_out():
    model = model_with("sdpa")
    assert decide({True: 2e-6, False: 3e-6}, model)[0] is True
    packed, why = decide({True: "no backward", False: 3e-6}, model)
    assert packed is False
    assert (
        why == "train.packing auto on cpu: packed (dense) failed: no backward, padded 3.00 us/token -> padded"
    )
    assert decide({True: "a", False: "b"}, model)[0] is False
    calls: list[int] = []

    def good() -> int:
        calls.append(1)
        return 10

    def bad() -> int:
        raise RuntimeError("cannot compile\nthe details")

    timings = time_per_token({True: bad, False: good}, CPU)
    assert timings[True] == "cannot compile" and isinstance(timings[False], float) and len(calls) == 2


def test_auto_is_packed_on_cpu_by_the_rule(make_config, caplog):
    with caplog.at_level(logging.INFO, logger="cascade_envs.trainer"):
        trainer = Trainer(make_config())
        metrics = trainer.train_step()
    assert metrics["train/packed"] == 1.0 and trainer.packed is True
    assert trainer.layout_note == "train.packing auto on cpu: packed (rule)" in caplog.text


def test_auto_measures_fused_layouts_and_the_measurement_leaves_the_update_alone(make_config, tmp_path):
    """With flex attention the first step times both layouts; flex has no CPU backward, so padded is
    kept, and the step's update equals a padded run's: the timed passes left no gradient behind."""
    flex = Trainer(
        make_config(
            model={"attn_implementation": "flex_attention"}, train={"output_dir": str(tmp_path / "f")}
        )
    )
    mf = flex.train_step()  # each trainer seeds torch's RNG: build and step one after the other
    padded = Trainer(make_config(train={"packing": False, "output_dir": str(tmp_path / "p")}))
    mp = padded.train_step()
    assert flex.packed is False and mf["train/packed"] == 0.0
    assert flex.layout_note.startswith("train.packing auto on cpu: packed (flex) failed: FlexAttention")
    assert "padded" in flex.layout_note and flex.layout_note.endswith("-> padded")
    assert mf["train/loss"] == pytest.approx(mp["train/loss"], abs=1e-6)
    for a, b in zip(flex.model.parameters(), padded.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_a_measured_packed_layout_that_fails_later_falls_back_to_padded(
    make_config, tmp_path, monkeypatch, caplog
):
    """Here the measurement is made to pick flex rows; their first real pass fails (no CPU backward), so
    the run goes on padded, with one warning, and the step's update is the padded one."""
    from cascade_envs.trainer import loop

    monkeypatch.setattr(loop, "choose", lambda setting, model, run_pass: (True, "measured: packed"))
    flex = Trainer(
        make_config(
            model={"attn_implementation": "flex_attention"}, train={"output_dir": str(tmp_path / "f")}
        )
    )
    with caplog.at_level(logging.WARNING, logger="cascade_envs.trainer"):
        mf = flex.train_step()
    assert flex.packed is False and mf["train/packed"] == 0.0
    assert "measured: packed; packed failed at step 1 (FlexAttention does not support backward" in caplog.text
    padded = Trainer(make_config(train={"packing": False, "output_dir": str(tmp_path / "p")}))
    mp = padded.train_step()
    assert mf["train/loss"] == pytest.approx(mp["train/loss"], abs=1e-6)
    for a, b in zip(flex.model.parameters(), padded.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)
