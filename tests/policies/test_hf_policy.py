"""HFPolicy on the embedded SmolLM2-135M model: logprobs, finish reasons, batching, seeds, errors."""

import asyncio
import copy

import pytest
import torch

from cascade_envs.core import CascadeError
from cascade_envs.policies import hf as hf_module
from cascade_envs.policies.hf import HFPolicy
from cascade_envs.policy import Policy, PolicyError, SamplingParams

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
STORY = [{"role": "user", "content": "Tell me a short story about a dragon."}]
QUESTIONS = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    FRANCE,
    [{"role": "user", "content": "Name a colour."}],
    [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Say hello in Spanish."},
    ],
]


def teacher_forced(model, prompt_ids, token_ids, temperature=1.0):
    ids = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(token_ids)[:, None])[:, 0]


def run(coro):
    return asyncio.run(coro)


def test_is_a_policy(policy):
    assert isinstance(policy, Policy)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_teacher_forced_pass(policy, temperature):
    (out,) = policy.generate([STORY], SamplingParams(max_tokens=8, temperature=temperature, seed=3))
    assert len(out.token_ids) == len(out.logprobs) == 8
    expected = teacher_forced(policy.model, out.prompt_token_ids, out.token_ids, temperature)
    assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4), (out.logprobs, expected)


def test_greedy_picks_argmax_and_reports_t1_logprobs(policy):
    (out,) = policy.generate([STORY], SamplingParams(max_tokens=6, temperature=0))
    ids = torch.tensor([out.prompt_token_ids + out.token_ids])
    with torch.no_grad():
        logits = policy.model(ids).logits[0, len(out.prompt_token_ids) - 1 : -1]
    assert out.token_ids == logits.argmax(-1).tolist()
    expected = teacher_forced(policy.model, out.prompt_token_ids, out.token_ids)
    assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


def test_finish_reason_length(policy):
    (out,) = policy.generate([STORY], SamplingParams(max_tokens=3, temperature=0))
    assert out.finish_reason == "length" and out.truncated
    assert len(out.token_ids) == 3
    assert str(out) == policy.decode(out.token_ids)


def test_finish_reason_stop_on_eos(policy):
    (out,) = policy.generate([FRANCE], SamplingParams(max_tokens=40, temperature=0))
    assert out.finish_reason == "stop"
    assert out.token_ids[-1] in policy.eos_token_ids
    assert "Paris" in out and "<|im_end|>" not in out
    assert len(out.logprobs) == len(out.token_ids)


def test_finish_reason_stop_string(policy):
    (out,) = policy.generate([FRANCE], SamplingParams(max_tokens=40, temperature=0, stop=["Paris"]))
    assert out.finish_reason == "stop"
    assert "Paris" not in out and out.startswith("The capital")
    # the token that completed the stop string is kept, and nothing after it
    assert policy.decode(out.token_ids).endswith("Paris")
    assert len(out.logprobs) == len(out.token_ids)


def test_stop_string_beats_length_on_the_same_token(policy):
    (full,) = policy.generate([FRANCE], SamplingParams(max_tokens=40, temperature=0, stop=["Paris"]))
    n = len(full.token_ids)
    (out,) = policy.generate([FRANCE], SamplingParams(max_tokens=n, temperature=0, stop=["Paris"]))
    assert out.finish_reason == "stop" and out.token_ids == full.token_ids


def test_concurrent_requests_are_batched_and_match_unbatched(policy, monkeypatch):
    sampling = SamplingParams(max_tokens=6, temperature=0)
    alone = [policy.generate([q], sampling)[0] for q in QUESTIONS]
    batch_sizes = []
    real = hf_module.generate_shared

    def spy(model, decode, requests, *args):
        batch_sizes.append(len(requests))
        return real(model, decode, requests, *args)

    monkeypatch.setattr(hf_module, "generate_shared", spy)

    async def together():
        return await asyncio.gather(*(policy.agenerate(q, sampling=sampling) for q in QUESTIONS))

    batched = run(together())
    assert batch_sizes == [len(QUESTIONS)]
    for a, b in zip(alone, batched, strict=True):
        assert b.token_ids == a.token_ids and str(b) == str(a) and b.finish_reason == a.finish_reason
        assert b.prompt_token_ids == a.prompt_token_ids
        assert torch.allclose(torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-4)


def test_rows_keep_their_own_settings_in_one_batch(policy):
    greedy = SamplingParams(max_tokens=5, temperature=0)
    short = SamplingParams(max_tokens=2, temperature=1.0, seed=1)
    stopped = SamplingParams(max_tokens=12, temperature=0, stop=["capital"])
    (alone,) = policy.generate([STORY], greedy)
    (stop_alone,) = policy.generate([FRANCE], stopped)

    async def mixed():
        return await asyncio.gather(
            policy.agenerate(STORY, sampling=greedy),
            policy.agenerate(FRANCE, sampling=short),
            policy.agenerate(FRANCE, sampling=stopped),
            policy.agenerate(STORY, sampling=SamplingParams(max_tokens=8, temperature=0)),
        )

    a, b, c, _ = run(mixed())
    assert a.token_ids == alone.token_ids and a.finish_reason == "length"
    assert len(b.token_ids) == 2 and b.finish_reason == "length"
    assert c.finish_reason == "stop" and str(c) == str(stop_alone) == "The "
    assert c.token_ids == stop_alone.token_ids and policy.decode(c.token_ids) == "The capital"
    assert len(c.logprobs) == len(c.token_ids)


def test_non_thinking_prompt_ends_with_empty_think_block(policy):
    text = policy.render_prompt(FRANCE, thinking=False)
    assert text.endswith("<|im_start|>assistant\n<think></think>")
    assert not policy.render_prompt(FRANCE, thinking=True).endswith("</think>")
    ids = policy.encode_prompt(FRANCE, thinking=False)
    assert policy.decode(ids).endswith("<think></think>")
    (out,) = policy.generate([FRANCE], SamplingParams(max_tokens=2, temperature=0), thinking=False)
    assert out.prompt_token_ids == ids


def test_template_that_adds_the_empty_think_block_is_not_doubled(policy):
    tokenizer = copy.deepcopy(policy.tokenizer)
    tokenizer.chat_template = policy.tokenizer.chat_template + (
        "{% if add_generation_prompt and enable_thinking is defined and not enable_thinking %}"
        "{{ '<think></think>' }}{% endif %}"
    )
    own = HFPolicy(policy.model, tokenizer=tokenizer)
    text = own.render_prompt(FRANCE, thinking=False)
    assert text.endswith("assistant\n<think></think>") and text.count("<think>") == 1


def test_seeded_sampling_is_reproducible(policy):
    sampling = SamplingParams(max_tokens=6, temperature=1.0, seed=1234)
    first, second = policy.generate([STORY, STORY], sampling)  # same seed, same batch
    (third,) = policy.generate([STORY], sampling)  # alone
    assert first.token_ids == second.token_ids == third.token_ids
    assert torch.allclose(torch.tensor(first.logprobs), torch.tensor(third.logprobs), atol=1e-4)
    (others,) = policy.generate_groups(
        [STORY], SamplingParams(max_tokens=6, temperature=1.0, seed=1), group_size=2
    )
    assert any(o.token_ids != first.token_ids for o in others)


def test_unseeded_sampling_follows_torch_manual_seed(policy):
    sampling = SamplingParams(max_tokens=6, temperature=1.0)
    torch.manual_seed(7)
    a = policy.generate([STORY], sampling)[0]
    torch.manual_seed(7)
    b = policy.generate([STORY], sampling)[0]
    assert a.token_ids == b.token_ids


def test_groups_use_consecutive_seeds(policy):
    sampling = SamplingParams(max_tokens=5, temperature=1.0, seed=40)
    groups = policy.generate_groups([STORY, FRANCE], sampling, group_size=3)
    assert [len(g) for g in groups] == [3, 3]
    (single,) = policy.generate([FRANCE], SamplingParams(max_tokens=5, temperature=1.0, seed=42))
    assert groups[1][2].token_ids == single.token_ids
    assert len({tuple(c.token_ids) for c in groups[0]}) > 1


def test_tiny_top_p_is_greedy(policy):
    (greedy,) = policy.generate([STORY], SamplingParams(max_tokens=6, temperature=0))
    (nucleus,) = policy.generate([STORY], SamplingParams(max_tokens=6, temperature=1.0, top_p=1e-6, seed=5))
    assert nucleus.token_ids == greedy.token_ids


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(max_tokens=0),
        SamplingParams(temperature=-1.0),
        SamplingParams(temperature=float("nan")),
        SamplingParams(top_p=0.0),
        SamplingParams(top_p=1.5),
        SamplingParams(stop=[1, 2]),  # type: ignore[list-item]
        SamplingParams(seed="x"),  # type: ignore[arg-type]
    ],
)
def test_bad_sampling_is_a_clear_error(policy, sampling):
    with pytest.raises(PolicyError, match="sampling"):
        policy.generate([FRANCE], sampling)


@pytest.mark.parametrize("messages", ["hello", [1, 2], None])
def test_bad_messages_are_a_clear_error(policy, messages):
    with pytest.raises(PolicyError, match="messages"):
        run(policy.agenerate(messages, sampling=SamplingParams(max_tokens=2)))


def test_missing_chat_template_is_a_clear_error(policy):
    tokenizer = copy.deepcopy(policy.tokenizer)
    tokenizer.chat_template = None
    with pytest.raises(PolicyError, match="chat template"):
        HFPolicy(policy.model, tokenizer=tokenizer).generate([FRANCE], SamplingParams(max_tokens=2))


def test_generation_failure_fails_its_callers_and_the_worker_survives(policy, monkeypatch):
    own = HFPolicy(policy.model, tokenizer=policy.tokenizer)
    real = hf_module.generate_shared
    calls = []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(*args)

    monkeypatch.setattr(hf_module, "generate_shared", flaky)
    sampling = SamplingParams(max_tokens=2, temperature=0)

    async def go():
        with pytest.raises(PolicyError, match="boom"):
            await own.agenerate(FRANCE, sampling=sampling)
        return await own.agenerate(FRANCE, sampling=sampling)

    assert len(run(go()).token_ids) == 2


def test_aclose_then_calls_raise(policy):
    own = HFPolicy(policy.model, tokenizer=policy.tokenizer)

    async def go():
        await own.agenerate(FRANCE, sampling=SamplingParams(max_tokens=1))
        await own.aclose()
        with pytest.raises(PolicyError, match="closed"):
            await own.agenerate(FRANCE, sampling=SamplingParams(max_tokens=1))

    run(go())
    with pytest.raises(PolicyError, match="closed"):
        own.generate([FRANCE], SamplingParams(max_tokens=1))


def test_works_across_event_loops(policy):
    sampling = SamplingParams(max_tokens=2, temperature=0)
    a = run(policy.agenerate(FRANCE, sampling=sampling))
    b = run(policy.agenerate(FRANCE, sampling=sampling))
    assert a.token_ids == b.token_ids


def test_training_mode_is_restored(policy):
    policy.model.train()
    try:
        policy.generate([FRANCE], SamplingParams(max_tokens=1, temperature=0))
        assert policy.model.training
    finally:
        policy.model.eval()


def test_from_spec_missing_path_is_one_line_error(tmp_path):
    with pytest.raises(CascadeError, match="model path not found") as info:
        HFPolicy.from_spec(f"hf:{tmp_path / 'nope'}")
    assert "\n" not in str(info.value)
    with pytest.raises(CascadeError, match="hf:PATH"):
        HFPolicy.from_spec("hf:")


@pytest.mark.parametrize("decoding", ["shared", "generate"])
def test_a_caller_that_stops_waiting_stops_its_generation(tmp_path, decoding):
    """A timed-out ``agenerate`` frees the model within a step: its batch does not decode to max_tokens."""
    import time

    from tests.trainer.toys import save_tiny

    policy = HFPolicy(str(save_tiny(tmp_path, seed=0)), device="cpu", decoding=decoding)
    policy.eos_token_ids = set()  # nothing ends a row but max_tokens (or its caller leaving)
    policy.model.generation_config.eos_token_id = None
    steps = []
    forward = policy.model.forward

    def slow_forward(*args, **kwargs):
        steps.append(time.monotonic())
        time.sleep(0.02)
        return forward(*args, **kwargs)

    policy.model.forward = slow_forward
    sampling = SamplingParams(max_tokens=100, temperature=1.0, seed=0)

    async def go():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(policy.agenerate(FRANCE, sampling=sampling), timeout=0.3)
        left = time.monotonic()
        # The model lock is free again almost at once: a short request is not stuck behind 100 steps.
        quick = await asyncio.wait_for(policy.agenerate(FRANCE, sampling=SamplingParams(max_tokens=2)), 30)
        return left, quick

    left, quick = asyncio.run(go())
    assert len(quick.token_ids) == 2
    abandoned = [t for t in steps if t < left]
    assert len(abandoned) < 30, len(abandoned)  # about 0.3 s / 0.02 s, not 100
    assert len([t for t in steps if t >= left]) <= 6  # a step or two of the old batch, then 2 new ones
    asyncio.run(policy.aclose())
