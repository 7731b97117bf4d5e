"""vLLM rollout engines as Ray actors (``rollout.engine: ray``, ``backend: vllm``), for real on CPU.

Run by ``.ci/vllm.sh`` (``vllm-cpu`` and Ray in their own venv; a missing one fails there). The
actors load the checkpoint; the trainer's weights are perturbed away from it, so an actor can only
match them through ``sync_weights``: after each sync, over both transports (object store, gloo
broadcast) and with many buckets, every engine's sampled-token logprobs must equal a transformers
forward pass of the trainer's weights.
"""

from __future__ import annotations

import asyncio
import os

import pytest

if os.environ.get("CASCADE_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm", reason="vllm is not installed here: bash .ci/vllm.sh runs these tests")
    pytest.importorskip("ray", reason="Ray is not installed here: bash .ci/vllm.sh runs these tests")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import torch

from cascade_envs.policy import SamplingParams
from cascade_envs.trainer.ray_engine import RayEngine
from tests import ray_local
from tests.trainer.toys import hf_logprobs, perturb, tiny_model, tiny_tokenizer

local_ray = ray_local.local_ray
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("host-shared-memory")]

TOL = 1e-4  # float32 on both sides (vLLM's CPU kernels vs transformers), as in test_vllm_engine.py
MESSAGES = [{"role": "user", "content": "say the word yes"}]
SAMPLED = SamplingParams(max_tokens=8, temperature=1.0, seed=0)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = tiny_tokenizer()
    checkpoint = tiny_model(len(tokenizer), seed=0, hidden=64)  # head_dim 32: vLLM's CPU attention
    checkpoint.generation_config.eos_token_id = tokenizer.eos_token_id
    checkpoint.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def assert_matches(engine: RayEngine, model) -> list:
    async def go():
        return await asyncio.gather(
            *(engine.agenerate(MESSAGES, sampling=SAMPLED, thinking=False) for _ in range(4))
        )

    completions = asyncio.run(go())
    for completion in completions:
        assert completion.token_ids
        diff = (torch.tensor(completion.logprobs) - hf_logprobs(model, completion)).abs().max().item()
        assert diff <= TOL, diff
    return completions


@pytest.mark.parametrize("transport", ["object_store", "collective"])
def test_vllm_engines_on_ray_follow_the_trainer_weights(local_ray, folder, transport):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    perturb(model, seed=1)  # only a sync can make the actors match
    engine = RayEngine(
        model,
        None,
        backend="vllm",
        num_engines=2 if transport == "object_store" else 1,  # a vLLM start costs ~30 s here
        num_cpus=0.5,
        weight_sync=transport,
        bucket_mb=0.05,
        threads=1,
        address=None,
        engine_kwargs={"dtype": "float32", "max_model_len": 128, "seed": 0},
    )
    try:
        assert engine.last_sync["buckets"] > 3
        assert engine.last_sync["tensors"] == len(list(model.parameters()))
        assert {w["device"] for w in engine.where} == {"cpu"}
        assert len({w["pid"] for w in engine.where}) == len(engine.actors)
        before = assert_matches(engine, model)
        perturb(model, seed=2)  # a "training step"
        engine.sync_weights(model)
        after = assert_matches(engine, model)
        assert [c.logprobs for c in before] != [c.logprobs for c in after]
    finally:
        engine.close()
