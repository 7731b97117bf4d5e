"""The vLLM rollout engine, for real on CPU (``vllm-cpu``; run by ``.ci/vllm.sh`` in its own venv).

The trainer side is a Hugging Face Llama (tests/trainer/toys.py, widened so vLLM's CPU attention
accepts its head size). Its weights are perturbed away from the checkpoint vLLM loads, so vLLM can
only match it through ``sync_weights``: after a sync, vLLM's sampled-token logprobs must equal a
transformers forward pass of the same weights, and a second perturbation + sync must move vLLM's
outputs with it.

Without vLLM these tests skip with a reason, except under ``CASCADE_REQUIRE_VLLM=1`` (set by
``.ci/vllm.sh``), where a missing vLLM fails them.
"""

from __future__ import annotations

import asyncio
import os

import pytest

if os.environ.get("CASCADE_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm", reason="vllm is not installed here: bash .ci/vllm.sh runs these tests")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import torch

from cascade_envs import Env, Reward, Turn
from cascade_envs.core import CascadeError
from cascade_envs.policy import ContextOverflowError, PolicyError, SamplingParams
from tests.trainer.toys import ROLES, WORDS, hf_logprobs, perturb, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.slow

TOL = 1e-4  # float32 on both sides; the measured max |diff| is <= 2e-5
MESSAGES = [
    [{"role": "user", "content": "say the word yes"}],
    [{"role": "user", "content": "one two red blue"}],
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from cascade_envs.trainer.vllm_engine import VLLMEngine

    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = tiny_tokenizer()
    checkpoint = tiny_model(len(tokenizer), seed=0, hidden=64)  # head_dim 32
    checkpoint.generation_config.eos_token_id = tokenizer.eos_token_id
    checkpoint.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    trainer_model = type(checkpoint).from_pretrained(folder, dtype=torch.float32).eval()
    perturb(trainer_model, seed=1)  # the "trained" weights: vLLM sees them only through the sync
    engine = VLLMEngine(trainer_model, tokenizer, dtype="float32", max_model_len=128, seed=0)
    yield engine, trainer_model, tokenizer
    engine.close()
    with pytest.raises(PolicyError, match="closed"):
        engine.generate(MESSAGES, SamplingParams(max_tokens=2))


def max_diff(completion, reference: torch.Tensor) -> float:
    return (torch.tensor(completion.logprobs) - reference).abs().max().item()


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_logprobs_match_transformers_after_sync(setup, temperature):
    from cascade_envs.trainer.engine import RolloutEngine

    engine, model, _ = setup
    assert isinstance(engine, RolloutEngine)
    sampling = SamplingParams(max_tokens=12, temperature=temperature, seed=3)
    for completion in engine.generate(MESSAGES, sampling):
        assert completion.token_ids and len(completion.logprobs) == len(completion.token_ids)
        assert completion.finish_reason in ("stop", "length")
        assert max_diff(completion, hf_logprobs(model, completion, temperature)) < TOL


def test_sync_changes_outputs_like_the_trainer_weights(setup):
    engine, model, _ = setup
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    before = engine.generate(MESSAGES, greedy)
    old = [hf_logprobs(model, c) for c in before]
    perturb(model, seed=2)
    assert max(max_diff(c, hf_logprobs(model, c)) for c in before) > 0.1, "the perturbation must matter"
    engine.sync_weights(model, bucket_mb=1)  # several buckets
    after = engine.generate(MESSAGES, greedy)
    assert [c.token_ids for c in after] != [c.token_ids for c in before]
    for c in after:
        ids = torch.tensor([c.prompt_token_ids + c.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(c.prompt_token_ids) - 1 : -1]
        assert c.token_ids == logits.argmax(-1).tolist()  # vLLM's greedy path is the new model's
        assert max_diff(c, hf_logprobs(model, c)) < TOL
    # Same prompts, old completions re-scored: vLLM now agrees with the new weights, not the old.
    rescored = [hf_logprobs(model, c) for c in before]
    assert any((o - r).abs().max() > 0.1 for o, r in zip(old, rescored, strict=True))


def test_prompts_follow_the_chat_template_and_thinking_mode(setup):
    engine, _, tokenizer = setup
    messages = MESSAGES[0]
    thinking = engine.render_prompt(messages, thinking=True)
    assert thinking == tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert engine.render_prompt(messages, thinking=False) == thinking + "<think></think>"
    completion = engine.generate([messages], SamplingParams(max_tokens=4, temperature=0.0), thinking=False)[0]
    assert completion.prompt_token_ids == engine.encode_prompt(messages, thinking=False)


def test_concurrent_agenerate_is_batched_and_correct(setup):
    engine, model, _ = setup

    async def run():
        calls = [
            engine.agenerate(MESSAGES[i % 2], sampling=SamplingParams(max_tokens=10, temperature=1.0, seed=i))
            for i in range(8)
        ]
        return await asyncio.gather(*calls)

    completions = asyncio.run(run())
    assert len(completions) == 8
    for c in completions:
        assert max_diff(c, hf_logprobs(model, c)) < TOL
    seeded = engine.generate([MESSAGES[0]], SamplingParams(max_tokens=10, temperature=1.0, seed=0))[0]
    assert seeded.token_ids == completions[0].token_ids  # a seed fixes the sample, whatever the batch


def test_cancelled_requests_are_aborted(setup):
    engine, _, _ = setup

    async def run():
        long = asyncio.create_task(engine.agenerate(MESSAGES[0], sampling=SamplingParams(max_tokens=100)))
        await asyncio.sleep(0)
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
        return await engine.agenerate(MESSAGES[1], sampling=SamplingParams(max_tokens=4, temperature=0.0))

    assert len(asyncio.run(run()).token_ids) == 4
    assert not engine._inflight and not engine._engine.has_unfinished_requests()


def test_stop_strings_and_length(setup):
    engine, _, tokenizer = setup
    free = engine.generate([MESSAGES[1]], SamplingParams(max_tokens=6, temperature=0.0))[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 6
    word = tokenizer.decode(free.token_ids[2:3]).strip()
    assert word, f"the third greedy token decodes to nothing: {free!r}"
    stopped = engine.generate([MESSAGES[1]], SamplingParams(max_tokens=6, temperature=0.0, stop=[word]))[0]
    assert stopped.finish_reason == "stop"
    assert word not in str(stopped) and str(free).startswith(str(stopped))
    assert len(stopped.token_ids) == len(stopped.logprobs) <= 3


def test_a_prompt_over_max_model_len_is_a_context_overflow(setup):
    engine, _, _ = setup
    with pytest.raises(ContextOverflowError, match="max_model_len"):
        engine.generate([[{"role": "user", "content": "yes " * 200}]], SamplingParams(max_tokens=4))


def test_an_overflowing_multi_turn_episode_is_truncated_not_masked(setup):
    from cascade_envs.rollout import RolloutRunner

    engine, _, _ = setup
    sampling = SamplingParams(
        max_tokens=8, temperature=0.0, stop=[*WORDS, *ROLES]
    )  # each turn ends on a word
    runner = RolloutRunner(engine, sampling=sampling, envs={"t/Long-v0": LongTurns()})
    (group,) = runner.run([("t/Long-v0", {"prompt": "say the word yes"})])
    (episode,) = group.episodes
    assert episode.error is None and episode.truncated and not episode.reward.masked
    assert episode.turns >= 1 and "context overflow" in str(episode.reward.reason)


class LongTurns(Env):
    """Each env turn answers with 40 more words, until the prompt overflows the engine's 128 tokens."""

    max_turns = 20

    async def aturn(self, episode, completion):
        return Turn(observation=[{"role": "user", "content": "yes " * 40}])

    async def ascore(self, task, answer):
        return Reward(1.0)


def test_bad_requests_fail_alone(setup):
    engine, _, _ = setup
    with pytest.raises(PolicyError, match="top_p"):
        engine.generate(MESSAGES, SamplingParams(max_tokens=4, top_p=0.0))
    with pytest.raises(PolicyError, match="list of dicts"):
        engine.generate(["not messages"], SamplingParams(max_tokens=4))  # type: ignore[list-item]
    assert engine.generate(MESSAGES, SamplingParams(max_tokens=4))[0].token_ids  # still serving


def test_sync_rejects_unknown_names_before_loading(setup):
    engine, model, _ = setup
    greedy = SamplingParams(max_tokens=8, temperature=0.0)
    before = engine.generate(MESSAGES, greedy)
    wrapped = [(f"base_model.{name}", p) for name, p in model.named_parameters()]
    with pytest.raises(CascadeError, match="not in the checkpoint"):
        engine.sync_weights(wrapped)
    assert [c.token_ids for c in engine.generate(MESSAGES, greedy)] == [c.token_ids for c in before]


def test_sleep_and_wake_are_safe_without_sleep_mode(setup, caplog):
    engine, model, _ = setup
    assert not engine.sleep_supported  # CPU: vLLM has no sleep mode
    engine.sleep()
    engine.sync_weights(model)
    engine.wake_up()
    completion = engine.generate([MESSAGES[0]], SamplingParams(max_tokens=4, temperature=0.0))[0]
    assert max_diff(completion, hf_logprobs(model, completion)) < TOL


def test_needs_a_local_checkpoint(tmp_path):
    from cascade_envs.trainer.vllm_engine import VLLMEngine

    with pytest.raises(CascadeError, match="local checkpoint folder"):
        VLLMEngine(tmp_path / "missing")


def test_tensor_parallel_workers_take_the_synced_weights(setup, monkeypatch):
    """tensor_parallel_size 2: two vLLM worker processes (one core each), the weights pickled to both."""
    import copy

    from cascade_envs.trainer.vllm_engine import VLLMEngine

    _, model, tokenizer = setup
    import vllm.envs

    vllm.envs.disable_envs_cache()  # the first engine froze vLLM's settings; this one needs another
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # vLLM's auto-binding wants a NUMA node per rank
    trainer_model = copy.deepcopy(model)
    perturb(trainer_model, seed=5)
    engine = VLLMEngine(
        trainer_model, tokenizer, dtype="float32", max_model_len=128, seed=0, tensor_parallel_size=2
    )
    try:
        sampling = SamplingParams(max_tokens=8, temperature=1.0, seed=1)
        for completion in engine.generate(MESSAGES, sampling):
            assert max_diff(completion, hf_logprobs(trainer_model, completion)) < TOL
        perturb(trainer_model, seed=6)
        engine.sync_weights(trainer_model, bucket_mb=1)
        for completion in engine.generate(MESSAGES, sampling):
            assert max_diff(completion, hf_logprobs(trainer_model, completion)) < TOL
    finally:
        engine.close()
