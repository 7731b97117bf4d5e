"""Static-cache decoding (the GPU path, run eagerly here): the same samples as shared decoding, a
failed CUDA-graph capture falls back to eager steps, and generation runs under the autocast asked for."""

import functools
import logging

import pytest
import torch

from cascade_envs.core import CascadeError
from cascade_envs.policies import shared_decoding, static_decoding
from cascade_envs.policies.hf import HFPolicy
from tests.policies.test_shared_decoding import mixed_requests


@pytest.fixture(scope="module")
def static(policy):
    return HFPolicy(policy.model, tokenizer=policy.tokenizer, decoding="static", max_batch_size=32)


def run(policy: HFPolicy, requests, **kwargs):
    return static_decoding.generate_static(
        policy.model, policy.decode, requests, policy.eos_token_ids, policy.pad_token_id, **kwargs
    )


def assert_same(a, b):
    assert [x.token_ids for x in a] == [y.token_ids for y in b]
    assert [str(x) for x in a] == [str(y) for y in b]
    assert [x.finish_reason for x in a] == [y.finish_reason for y in b]
    for x, y in zip(a, b, strict=True):
        assert len(x.logprobs) == len(x.token_ids)
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)


def test_static_decoding_samples_what_shared_decoding_samples(static):
    """Greedy, sampled, top-p and stop-string rows of three prompts, each with its own max_tokens: the
    fixed buffers (every row kept to the end, the mask opened one column a step) change nothing."""
    requests = mixed_requests(static)
    shared = shared_decoding.generate_shared(
        static.model, static.decode, requests, static.eos_token_ids, static.pad_token_id
    )
    assert_same(run(static, requests), shared)
    assert any(c.finish_reason == "stop" for c in shared) and len({len(c.token_ids) for c in shared}) > 2


def test_a_failed_graph_capture_decodes_eagerly_with_the_same_tokens(static, monkeypatch, caplog):
    """On CPU the capture cannot happen at all: the one attempt fails, a warning says so, the steps go on."""
    monkeypatch.setattr(static_decoding, "WARMUP_STEPS", 0)
    requests = mixed_requests(static)
    with caplog.at_level(logging.WARNING, logger="cascade_envs.policies"):
        captured = run(static, requests, graphs=True)
    failures = [r for r in caplog.records if "CUDA graph capture failed, decoding eagerly" in r.getMessage()]
    assert len(failures) == 1
    assert_same(captured, run(static, requests, graphs=False))


def test_static_decoding_needs_an_sdpa_style_mask(policy, monkeypatch):
    assert static_decoding.supports_static_decoding(policy.model)
    assert HFPolicy(policy.model, tokenizer=policy.tokenizer).decoding == "shared"  # auto on CPU
    monkeypatch.setattr(policy.model.config, "_attn_implementation", "eager")
    assert not static_decoding.supports_static_decoding(policy.model)
    with pytest.raises(CascadeError, match=r"decoding=.static. does not support .* eager attention"):
        HFPolicy(policy.model, tokenizer=policy.tokenizer, decoding="static")


def test_generation_runs_under_the_autocast_it_is_given(policy, monkeypatch):
    seen: list[object] = []
    forward = policy.model.forward

    @functools.wraps(forward)  # keeps the signature the decoding reads its cache keyword from
    def spy(*args, **kwargs):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return forward(*args, **kwargs)

    monkeypatch.setattr(policy.model, "forward", spy)
    bf16 = HFPolicy(
        policy.model, tokenizer=policy.tokenizer, decoding="static", autocast_dtype=torch.bfloat16
    )
    bf16._complete(mixed_requests(bf16)[:2])
    assert seen and set(seen) == {torch.bfloat16}
    seen.clear()
    HFPolicy(policy.model, tokenizer=policy.tokenizer)._complete(mixed_requests(bf16)[:2])
    assert seen and set(seen) == {None}
