"""Rollouts in the training precision: the float32 LM head, the engine under the trainer's autocast, and
why a float32 engine drifts from a bf16 trainer once logits grow (issue 32's 0.07-0.11 gap)."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from cascade_envs.policy import SamplingParams
from cascade_envs.trainer.config import ModelConfig
from cascade_envs.trainer.loop import Trainer
from cascade_envs.trainer.model import collate, load_model
from cascade_envs.trainer.packing import pass_logprobs
from cascade_envs.trainer.precision import Float32Head, autocast, compute_dtype, use_float32_head
from cascade_envs.trainer.sequence import TrainSequence

CPU = torch.device("cpu")


def test_the_float32_head_gives_float32_logits_and_gradients_under_autocast():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 7, bias=False)
    reference = copy.deepcopy(head)
    head.__class__ = Float32Head
    x = torch.randn(3, 16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = head(x)
        assert reference(x_ref).dtype == torch.bfloat16  # what autocast does to a plain head
    assert logits.dtype == torch.float32
    expected = x_ref @ reference.weight.t()
    assert torch.equal(logits, expected)
    (logits * torch.arange(7.0)).sum().backward()
    (expected * torch.arange(7.0)).sum().backward()
    assert torch.allclose(x.grad, x_ref.grad) and torch.allclose(head.weight.grad, reference.weight.grad)


def test_the_head_turns_float32_only_under_a_lower_precision(tiny_model_dir):
    plain, _ = load_model(ModelConfig(path=str(tiny_model_dir)))
    assert compute_dtype(ModelConfig(), CPU) is None and type(plain.lm_head) is torch.nn.Linear
    mixed, _ = load_model(ModelConfig(path=str(tiny_model_dir), mixed_precision="bfloat16"))
    assert isinstance(mixed.lm_head, Float32Head)
    assert mixed.lm_head.weight is mixed.model.embed_tokens.weight  # still tied
    assert mixed.state_dict().keys() == plain.state_dict().keys()
    assert use_float32_head(mixed, ModelConfig(mixed_precision="bfloat16"), CPU)  # idempotent


def _logprobs_three_ways(model, ids, prompt):
    """Teacher-forced bf16 logprobs (the trainer) and step-by-step decoding ones (an engine), in float32
    and under bf16 autocast."""
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    pick = lambda logits: torch.log_softmax(logits.float(), -1).gather(-1, ids[:, prompt:, None])[..., 0]  # noqa: E731
    with bf16(), torch.no_grad():
        trainer = pick(model(ids).logits[:, prompt - 1 : -1])

    def engine(context):
        with context, torch.inference_mode():
            cache = DynamicCache(config=model.config)
            out = model(ids[:, :prompt], cache=cache, use_cache=True)
            steps = [out.logits[:, -1]]
            for t in range(prompt, ids.shape[1] - 1):
                steps.append(model(ids[:, t : t + 1], cache=cache, use_cache=True).logits[:, -1])
        return pick(torch.stack(steps, 1))

    return [(engine(c) - trainer).abs().mean().item() for c in (contextlib.nullcontext(), bf16())]


def test_large_logits_separate_a_float32_engine_from_a_bf16_trainer_unless_both_share_the_path():
    """Trained models sharpen: with logits of standard deviation ~6, a float32 engine drifts from the bf16
    trainer; an engine under the same autocast drifts less, and with the float32 head less again."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=2048,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(40)
    ids = torch.randint(0, 2048, (4, 32))
    fp32_engine, bf16_engine = _logprobs_three_ways(model, ids, 8)
    model.lm_head.__class__ = Float32Head
    _, shared_path = _logprobs_three_ways(model, ids, 8)
    assert shared_path < 0.7 * bf16_engine < 0.7 * fp32_engine, (shared_path, bf16_engine, fp32_engine)


def test_the_engine_samples_under_the_trainers_autocast_from_the_weights_just_trained(make_config):
    trainer = Trainer(make_config(model={"mixed_precision": "bfloat16"}, optim={"lr": 3e-2}))
    policy = trainer.engine.policy
    assert policy.autocast_dtype is torch.bfloat16 and isinstance(trainer.model.lm_head, Float32Head)
    before = copy.deepcopy(trainer.model)
    assert not trainer.train_step().get("skipped")
    groups = policy.generate_groups(
        [[{"role": "user", "content": "say yes"}]], SamplingParams(max_tokens=6, seed=3), group_size=4
    )
    seqs = [TrainSequence(c.prompt_token_ids, c.token_ids, 0.0, "e", logprobs=c.logprobs) for c in groups[0]]
    mb = collate(seqs, trainer.pad_id, CPU)
    engine = torch.tensor([s.logprobs + [0.0] * (mb.response_ids.shape[1] - len(s.logprobs)) for s in seqs])

    def gap(model) -> float:
        with torch.no_grad():
            logp, _ = pass_logprobs(model.eval(), mb, 1.0, autocast(trainer.config.model, CPU))
        return ((logp - engine).abs() * mb.response_mask).sum().item() / mb.response_mask.sum().item()

    now, stale = gap(trainer.model), gap(before)
    assert now < 1e-3 < stale / 10, (now, stale)  # the weights just trained, in the trainer's precision


@pytest.mark.parametrize("precision", ["float16"])
def test_float16_without_loss_scaling_is_refused(make_config, precision):
    from cascade_envs.trainer.config import ConfigError

    with pytest.raises(ConfigError, match=r"model\.mixed_precision: float16 needs loss scaling"):
        make_config(model={"mixed_precision": precision})
    with pytest.raises(ConfigError, match=r"model\.dtype: float16 would train float16 weights"):
        make_config(model={"dtype": precision})
