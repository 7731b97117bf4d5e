"""The batch builder: token layout, masking, the overlong rule, dynamic filtering; the HF engine."""

from __future__ import annotations

import pytest
import torch

import cascade_envs
from cascade_envs.core import Completion
from cascade_envs.env import run_sync
from cascade_envs.mix import EnvMix
from cascade_envs.trainer.advantages import GRPOAdvantages
from cascade_envs.trainer.batch import BatchBuilder
from cascade_envs.trainer.config import RolloutConfig
from cascade_envs.trainer.engine import HFEngine, RolloutEngine
from cascade_envs.trainer.model import collate, response_logits, token_logprobs
from cascade_envs.trainer.sequence import TrainSequence
from tests.trainer.toys import tiny_model, tiny_tokenizer


@pytest.fixture
def engine():
    torch.manual_seed(0)
    tok = tiny_tokenizer()
    model = tiny_model(len(tok))
    model.generation_config.eos_token_id = tok.eos_token_id
    return HFEngine(model, tok)


def builder(engine, env_id, *, max_tokens=6, group_size=4, prompts=3, dynamic_filtering=True, max_rounds=2):
    rollout = RolloutConfig(
        max_tokens=max_tokens,
        group_size=group_size,
        prompts_per_step=prompts,
        dynamic_filtering=dynamic_filtering,
        max_rounds=max_rounds,
    )
    return BatchBuilder(engine, EnvMix({env_id: 1.0}, seed=0), GRPOAdvantages(rollout), rollout)


def test_hf_engine_satisfies_the_protocol(engine):
    assert isinstance(engine, RolloutEngine)
    before = [p.clone() for p in engine.model.parameters()]
    engine.sync_weights(engine.model)  # shares the training model: nothing to copy
    assert all(torch.equal(a, b) for a, b in zip(before, engine.model.parameters(), strict=True))
    other = tiny_model(len(engine.policy.tokenizer), seed=1)
    engine.sync_weights(other)
    assert all(torch.equal(a, b) for a, b in zip(other.parameters(), engine.model.parameters(), strict=True))


def test_sequences_are_prompt_plus_completion_tokens_with_matching_logprobs(engine):
    batch = builder(engine, "test/SayYes-v0", dynamic_filtering=False).build()
    assert len(batch.sequences) == 3 * 4 and len(batch.groups) == 3
    env = cascade_envs.make("test/SayYes-v0")
    for group in batch.groups:
        prompt = engine.policy.encode_prompt(env.prompt(env.load_task(group.row)), thinking=False)
        for episode in group.episodes:
            assert episode.response.prompt_token_ids == prompt
    seqs = batch.sequences
    mb = collate(seqs, pad_id=0, device=torch.device("cpu"))
    with torch.no_grad():
        logp = token_logprobs(response_logits(engine.model, mb), mb.response_ids)
    for row, seq in enumerate(seqs):
        n = len(seq.response_ids)
        assert seq.response_ids == list(mb.response_ids[row, :n])
        assert mb.response_mask[row].sum() == n
        # what the trainer computes for the sampled tokens is what the engine sampled them with
        assert torch.allclose(logp[row, :n], torch.tensor(seq.logprobs), atol=1e-4)


def test_generation_cut_at_max_length_scores_zero():
    env = cascade_envs.make("test/SayYes-v0")
    task = env.tasks[0]
    assert run_sync(env.areward(task, Completion("yes yes", finish_reason="stop"))).value == 1.0
    cut = run_sync(env.areward(task, Completion("yes yes", finish_reason="length")))
    assert cut.value == 0.0 and not cut.masked and cut.components["overlong"] == 1.0


def test_truncated_rollouts_get_the_overlong_zero(engine):
    batch = builder(engine, "test/SayYes-v0", max_tokens=2, dynamic_filtering=False).build()
    truncated = [e for g in batch.played for e in g.episodes if e.response.finish_reason == "length"]
    assert truncated, "max_tokens=2 should cut some generations"
    assert all(e.reward.value == 0.0 and "overlong" in (e.reward.reason or "") for e in truncated)


def test_masked_samples_are_left_out(engine):
    batch = builder(engine, "test/HalfBroken-v0", prompts=4, dynamic_filtering=False).build()
    masked = [e for g in batch.played for e in g.episodes if e.reward.masked]
    assert masked, "some answers have an odd number of words"
    assert batch.samples_masked == len(masked)
    masked_kept = [e for g in batch.groups for e in g.episodes if e.reward.masked]
    assert len(batch.groups) == 4 and len(batch.sequences) == 4 * 4 - len(masked_kept)
    assert any("verifier crashed" in reason for reason in batch.mask_reasons)


def test_dynamic_filtering_drops_constant_groups_and_counts_rounds(engine):
    batch = builder(engine, "test/Constant-v0", max_rounds=3).build()
    assert batch.empty and batch.rounds == 3
    # 3 prompts asked: 4 at the seed keep rate 0.75, then twice 3 x 2 (the rate is down to its bound)
    assert batch.groups_filtered == len(batch.played) == 4 + 6 + 6
    assert batch.fill_ratio == 0.0
    assert batch.filtered_fraction == 1.0
    kept = builder(engine, "test/Constant-v0", dynamic_filtering=False).build()
    assert len(kept.groups) == 3 and kept.rounds == 1
    assert all(s.advantage == 0.0 for s in kept.sequences)


def test_filtering_refills_with_fresh_prompts(engine):
    b = builder(engine, "test/SayYes-v0", prompts=4, max_rounds=5)
    batch = b.build()
    assert len(batch.groups) <= 4
    assert (
        len(batch.played)
        == len(batch.groups) + batch.groups_surplus + batch.groups_filtered + batch.groups_masked
    )
    if batch.groups_filtered:
        assert batch.rounds > 1
    for group in batch.groups:
        assert len({e.reward.value for e in group.episodes}) > 1
    assert batch.generated_tokens > 0 and batch.generation_s > 0


@pytest.mark.parametrize("chunk", [1 << 24, 7])
def test_token_logprobs_and_entropy_match_the_definitions(monkeypatch, chunk):
    import cascade_envs.trainer.model as model_module

    monkeypatch.setattr(model_module, "CHUNK_ELEMENTS", chunk)  # 7: one row per chunk
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 11, requires_grad=True)
    tokens = torch.randint(0, 11, (3, 4))
    logp, entropy = token_logprobs(logits, tokens, entropy=True)
    expected = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(logp, expected, atol=1e-6)
    assert torch.allclose(entropy, torch.distributions.Categorical(logits=logits).entropy(), atol=1e-5)
    assert not entropy.requires_grad
    logp.sum().backward()
    assert torch.isfinite(logits.grad).all()
    bf16 = token_logprobs(logits.detach().bfloat16(), tokens)
    assert bf16.dtype == torch.float32 and torch.allclose(bf16, expected.detach(), atol=0.05)


def test_shared_prompt_forward_matches_the_full_forward():
    """Groups share their prompt's KV cache in training: same logits and gradients as one pass per sequence."""
    import cascade_envs.trainer.model as model_module

    tok = tiny_tokenizer()
    model = tiny_model(len(tok)).train()
    a, b = [1, 4, 15, 6, 2, 1, 5], [1, 4, 6, 2, 1, 5]
    seqs = [
        TrainSequence(a, [9, 10, 2], 1.0, "e"),
        TrainSequence(a, [9], -1.0, "e"),
        TrainSequence(b, [11, 12, 13, 2], 0.5, "e"),
        TrainSequence(b, [11, 2], 0.5, "e"),
        TrainSequence(b, [], 0.5, "e"),
        # a multi-turn episode: env tokens (loss mask 0) mid-response must stay visible to later tokens
        TrainSequence(
            b, [11, 2, 1, 7, 8, 2, 1, 5, 12, 2], 0.5, "e", loss_mask=[1, 1, 0, 0, 0, 0, 0, 0, 1, 1]
        ),
    ]
    mb = collate(seqs, pad_id=0, device=torch.device("cpu"))
    grads = []
    for forward in (model_module._full_logits, model_module.response_logits):
        logits = forward(model, mb)
        logp = token_logprobs(logits, mb.response_ids)
        (logp * mb.response_mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad()
        if forward is model_module._full_logits:
            full = logp.detach()
    assert torch.allclose(full * mb.response_mask, logp.detach() * mb.response_mask, atol=1e-5)
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(*grads, strict=True))
    assert model_module._shared_prompt_logits(model, mb) is not None  # the shared path really ran
