"""Shared-prefill decoding: the same samples as ``model.generate``, one prefill per distinct prompt,
finished rows leave the batch."""

import pytest
import torch

from cascade_envs.core import CascadeError
from cascade_envs.policies import shared_decoding
from cascade_envs.policies.decoding import GenRequest
from cascade_envs.policies.hf import HFPolicy
from cascade_envs.policy import SamplingParams

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
STORY = [{"role": "user", "content": "Tell me a short story about a dragon."}]
COLOUR = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def both(policy):
    """The embedded model through each decoding path."""
    shared = HFPolicy(policy.model, tokenizer=policy.tokenizer, decoding="shared", max_batch_size=32)
    generate = HFPolicy(policy.model, tokenizer=policy.tokenizer, decoding="generate", max_batch_size=32)
    return shared, generate


def mixed_requests(policy: HFPolicy) -> list[GenRequest]:
    """Three prompts of different lengths, repeated, each row with its own settings."""
    france, story, colour = (policy.encode_prompt(m) for m in (FRANCE, STORY, COLOUR))
    settings = [
        (story, 12, 1.0, 1.0, ()),
        (story, 12, 1.0, 1.0, ()),
        (story, 3, 0.0, 1.0, ()),
        (france, 16, 0.0, 1.0, ("Paris",)),
        (france, 16, 0.8, 0.9, ()),
        (france, 9, 1.0, 1.0, ()),
        (colour, 10, 1.0, 0.5, ()),
        (colour, 10, 1.0, 1.0, ()),
    ]
    return [
        GenRequest(prompt_ids=p, max_tokens=n, temperature=t, top_p=top_p, seed=100 + i, stop=stop)
        for i, (p, n, t, top_p, stop) in enumerate(settings)
    ]


def test_shared_decoding_samples_what_generate_samples(both):
    shared, generate = both
    requests = mixed_requests(shared)
    a = shared_decoding.generate_shared(
        shared.model, shared.decode, requests, shared.eos_token_ids, shared.pad_token_id
    )
    b = generate._complete(requests)
    assert [x.token_ids for x in a] == [y.token_ids for y in b]
    assert [str(x) for x in a] == [str(y) for y in b]
    assert [x.finish_reason for x in a] == [y.finish_reason for y in b]
    for x, y in zip(a, b, strict=True):
        assert len(x.logprobs) == len(x.token_ids)
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
    assert a[3].finish_reason == "stop" and "Paris" not in str(a[3])  # the stop string row
    assert len(a[2].token_ids) == 3 and a[2].finish_reason == "length"


def test_each_distinct_prompt_is_prefilled_once_and_ended_rows_leave_the_batch(both, monkeypatch):
    shared, _ = both
    batch_rows: list[tuple[int, int]] = []  # (rows, tokens per row) of each forward pass
    real_forward = shared.model.forward

    def counting(*args, **kwargs):
        ids = kwargs["input_ids"]
        batch_rows.append((ids.shape[0], ids.shape[1]))
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(shared.model, "forward", counting)
    prompt = shared.encode_prompt(STORY)
    requests = [
        GenRequest(prompt_ids=prompt, max_tokens=2 if i < 4 else 10, temperature=1.0, top_p=1.0, seed=i)
        for i in range(8)
    ]
    outs = shared_decoding.generate_shared(
        shared.model, shared.decode, requests, shared.eos_token_ids, shared.pad_token_id
    )
    assert batch_rows[0] == (1, len(prompt))  # one prefill of the one prompt for 8 rows
    assert all(tokens == 1 for _, tokens in batch_rows[1:])
    assert batch_rows[1][0] == 8 and batch_rows[-1][0] <= 4  # the four 2-token rows were dropped
    assert [len(o.token_ids) for o in outs[:4]] == [2, 2, 2, 2]


def test_a_group_gets_distinct_seeded_samples_that_repeat(both):
    shared, _ = both
    sampling = SamplingParams(max_tokens=10, temperature=1.0, seed=7)
    first = shared.generate_groups([STORY], sampling, group_size=4)[0]
    again = shared.generate_groups([STORY], sampling, group_size=4)[0]
    assert [o.token_ids for o in first] == [o.token_ids for o in again]
    assert len({tuple(o.token_ids) for o in first}) > 1


def test_auto_uses_shared_decoding_only_where_the_model_supports_it(policy, monkeypatch):
    assert HFPolicy(policy.model, tokenizer=policy.tokenizer).decoding == "shared"
    monkeypatch.setattr(policy.model.config, "model_type", "mamba")
    assert HFPolicy(policy.model, tokenizer=policy.tokenizer).decoding == "generate"
    with pytest.raises(CascadeError, match="does not support model type 'mamba'"):
        HFPolicy(policy.model, tokenizer=policy.tokenizer, decoding="shared")
    with pytest.raises(CascadeError, match="unknown decoding 'fast'"):
        HFPolicy(policy.model, tokenizer=policy.tokenizer, decoding="fast")
