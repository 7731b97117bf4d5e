"""The trainer's HF engine puts a step's rollouts in one generation batch."""

import asyncio

from cascade_envs.policy import SamplingParams

STORY = [{"role": "user", "content": "Name a colour."}]


def test_hf_engine_generates_twenty_concurrent_rollouts_in_one_batch(policy, monkeypatch):
    from cascade_envs.policies import hf
    from cascade_envs.trainer.engine import HFEngine

    sizes: list[int] = []
    real = hf.generate_shared

    def counting(model, decode, requests, eos_ids, pad_id):
        sizes.append(len(requests))
        return real(model, decode, requests, eos_ids, pad_id)

    monkeypatch.setattr(hf, "generate_shared", counting)
    engine = HFEngine(policy.model, policy.tokenizer)
    sampling = SamplingParams(max_tokens=2, temperature=1.0, seed=0)

    async def rollouts():
        try:
            return await asyncio.gather(*(engine.agenerate(STORY, sampling=sampling) for _ in range(20)))
        finally:
            await engine.aclose()

    outs = asyncio.run(rollouts())
    assert sizes == [20]  # HFPolicy's own default (16) would split it into 16 + 4
    assert all(1 <= len(o.token_ids) <= 2 for o in outs)


def test_hf_engine_keeps_an_explicit_batch_size(policy):
    from cascade_envs.trainer.engine import HFEngine

    assert HFEngine(policy.model, policy.tokenizer, max_batch_size=4).policy.max_batch_size == 4


def test_hf_engine_refuses_to_cast_or_move_the_training_model(policy):
    import pytest
    import torch

    from cascade_envs.core import CascadeError
    from cascade_envs.trainer.engine import HFEngine

    dtype = next(policy.model.parameters()).dtype
    for key, value in (("dtype", "bfloat16" if dtype != torch.bfloat16 else "float32"), ("device", "meta")):
        with pytest.raises(CascadeError, match=f"rollout.engine_kwargs.{key}: .* set model.{key} instead"):
            HFEngine(policy.model, policy.tokenizer, **{key: value})
    assert next(policy.model.parameters()).dtype == dtype and policy.model.device.type == "cpu"
