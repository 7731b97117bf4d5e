"""Rollout engines as Ray actors (``rollout.engine: ray``, HF backend) on a local Ray (2 CPUs, temp dirs).

The trainer's model is perturbed away from the checkpoint the actors load, so an actor can only
match it through ``sync_weights``: after a sync, every engine's greedy tokens and their logprobs
must equal a transformers forward pass of the trainer's weights, over both transports (object
store, gloo broadcast) and with many buckets; a dead actor and a slow call give one clear error.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from cascade_envs.core import CascadeError
from cascade_envs.policy import PolicyError, SamplingParams
from tests import ray_local
from tests.trainer.toys import hf_logprobs, perturb, tiny_model, tiny_tokenizer

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cascade-envs[ray]')")
from cascade_envs.trainer.ray_engine import EngineDied, RayEngine, RaySettings  # noqa: E402

local_ray = ray_local.local_ray
pytestmark = pytest.mark.xdist_group("host-shared-memory")

TOL = 1e-5  # float32 on both sides, the same transformers code (the actor runs with 1 thread)
MESSAGES = [
    [{"role": "user", "content": "say the word yes"}],
    [{"role": "user", "content": "one two red blue"}],
]
GREEDY = SamplingParams(max_tokens=6, temperature=0.0)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = tiny_tokenizer()
    checkpoint = tiny_model(len(tokenizer), seed=0)
    checkpoint.generation_config.eos_token_id = tokenizer.eos_token_id
    checkpoint.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def trainer_model(folder, seed: int):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    perturb(model, seed)
    return model


def generate_on_each(engine: RayEngine, messages) -> list:
    """One greedy completion of ``messages`` from every engine actor (the least-loaded rule spreads them)."""

    async def go():
        return await asyncio.gather(
            *(engine.agenerate(messages, sampling=GREEDY, thinking=False) for _ in engine.actors)
        )

    return asyncio.run(go())


def assert_matches(engine: RayEngine, model) -> None:
    for messages in MESSAGES:
        completions = generate_on_each(engine, messages)
        assert len({tuple(c.token_ids) for c in completions}) == 1  # every engine has the same weights
        for completion in completions:
            assert completion.token_ids
            diff = (torch.tensor(completion.logprobs) - hf_logprobs(model, completion)).abs().max().item()
            assert diff <= TOL, diff


@pytest.mark.parametrize("transport", ["object_store", "collective"])
def test_engines_follow_the_trainer_weights_after_each_sync(local_ray, folder, transport):
    model = trainer_model(folder, seed=1)  # the actors loaded the checkpoint: only a sync makes them match
    engine = RayEngine(
        model,
        None,
        num_engines=2,
        num_cpus=0.5,
        weight_sync=transport,
        bucket_mb=0.002,
        threads=1,
        address=None,
    )
    try:
        assert engine.last_sync["buckets"] > 3 and engine.last_sync["tensors"] == len(
            list(model.parameters())
        )
        assert_matches(engine, model)
        before = generate_on_each(engine, MESSAGES[0])[0]
        perturb(model, seed=2)  # a "training step"
        engine.sync_weights(model)
        after = generate_on_each(engine, MESSAGES[0])[0]
        assert (before.token_ids, before.logprobs) != (after.token_ids, after.logprobs)
        assert_matches(engine, model)
        assert engine.last_sync["sync_s"] > 0
    finally:
        engine.close()


def test_a_dead_engine_actor_fails_calls_and_the_next_sync_with_one_line(local_ray, folder):
    model = trainer_model(folder, seed=1)
    engine = RayEngine(model, None, num_engines=1, num_cpus=0.5, threads=1, address=None)
    try:
        ray_local.kill_and_wait(engine.actors[0])
        with pytest.raises(EngineDied, match=r"rollout engine 0 \(.*\) died"):
            generate_on_each(engine, MESSAGES[0])
        with pytest.raises(EngineDied, match="died"):
            engine.sync_weights(model)
    finally:
        engine.close()


def test_every_remote_call_has_a_time_bound(local_ray, folder):
    model = trainer_model(folder, seed=1)
    engine = RayEngine(
        model, None, num_engines=1, num_cpus=0.5, threads=1, address=None, call_timeout_s=0.001
    )
    try:
        slow = SamplingParams(max_tokens=64, temperature=1.0)
        with pytest.raises(PolicyError, match=r"did not answer within 0\.001 s"):
            asyncio.run(engine.agenerate(MESSAGES[0], sampling=slow, thinking=False))
    finally:
        engine.close()


def test_a_trainer_step_syncs_the_ray_engines(local_ray, make_config):
    from cascade_envs.trainer.loop import Trainer

    config = make_config(
        rollout={"engine": "ray", "engine_kwargs": {"num_cpus": 0.5, "threads": 1, "address": None}},
        train={"steps": 1},
    )
    trainer = Trainer(config)
    try:
        metrics = trainer.train_step()
        assert metrics["time/sync_s"] > 0 and trainer.engine.last_sync["tensors"] > 0
        assert_matches(trainer.engine, trainer.model)
    finally:
        trainer.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpus": 1}, "unknown key"),
        ({"backend": "sglang"}, "backend must be one of hf, vllm"),
        ({"tensor_parallel_size": 2}, "the hf backend has none"),
        ({"backend": "vllm", "tensor_parallel_size": 2, "colocate": True}, "tensor_parallel_size must be 1"),
        ({"weight_sync": "nfs"}, "weight_sync must be"),
        ({"colocate": True, "weight_sync": "collective"}, "cannot reach an engine on the trainer's own GPU"),
        ({"call_timeout_s": 0}, "call_timeout_s must be a positive number"),
        ({"num_engines": 0}, "num_engines must be a whole number"),
    ],
)
def test_bad_settings_fail_before_ray_starts(kwargs, message):
    with pytest.raises(CascadeError, match=message):
        RaySettings.parse(kwargs)


def test_gpu_bundles_follow_colocation():
    assert RaySettings().bundle(gpus=False) == {"CPU": 1}
    assert RaySettings(backend="vllm", tensor_parallel_size=2).bundle(gpus=True) == {"CPU": 1, "GPU": 2}
    assert RaySettings(colocate=True, gpu_fraction=0.4).bundle(gpus=True) == {"CPU": 1, "GPU": 0.4}


def test_mopd_teachers_on_a_ray_actor_score_like_local_ones(local_ray, tiny_model_dir, tmp_path):
    from cascade_envs.trainer.checks import config_from_dict
    from cascade_envs.trainer.loop import Trainer
    from cascade_envs.trainer.sequence import TrainSequence
    from cascade_envs.trainer.sources import HFScorer
    from tests.trainer.toys import save_tiny

    teacher = save_tiny(tmp_path / "teacher", seed=2)
    config = config_from_dict(
        {
            "algorithm": "mopd",
            "model": {"path": str(tiny_model_dir)},
            "mix": {"envs": {"test/SayYes-v0": 1.0}},
            "mopd": {
                "default_teacher": str(teacher),
                "teacher_placement": "ray",
                "teacher_actor_options": {"num_cpus": 0.5},
            },
            "rollout": {"group_size": 1, "prompts_per_step": 4, "max_tokens": 6},
            "optim": {"lr": 3e-2, "micro_batch_size": 8},
            "train": {
                "steps": 1,
                "output_dir": str(tmp_path / "run"),
                "tensorboard": False,
                "progress": False,
                "plot": False,
            },
        }
    )
    trainer = Trainer(config)
    try:
        (remote,) = trainer.sources["teacher"].scorers.values()
        sequences = [
            TrainSequence([1, 3, 8], [6, 7, 2], 0.5, "test/SayYes-v0"),
            TrainSequence([1, 4], [6, 2], -0.5, "test/SayYes-v0"),
        ]
        from transformers import AutoModelForCausalLM

        local = HFScorer(
            "local",
            AutoModelForCausalLM.from_pretrained(teacher).eval(),
            pad_id=0,
            micro_batch_size=8,
            temperature=config.rollout.temperature,
        )
        assert remote.score(sequences) == local.score(sequences)
        metrics = trainer.train_step()
        assert "mopd/teacher_top1_agreement" in metrics
    finally:
        trainer.close()
    deadline = time.monotonic() + 60
    with pytest.raises(ray.exceptions.RayActorError):  # closing the trainer stopped the teacher actor
        while time.monotonic() < deadline:  # ray.kill lands asynchronously: a call may still run first
            ray.get(remote.actor.ready.remote(), timeout=60)
            time.sleep(0.2)
