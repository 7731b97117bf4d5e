"""Generation ends on every end-of-sequence token of the tokenizer, with the real SmolLM2 tokenizer."""

from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from cascade_envs.policies.decoding import end_token_ids
from cascade_envs.policy import SamplingParams

STORY = [{"role": "user", "content": "Tell me a short story about a dragon."}]


@contextmanager
def force_token_at(model, token_id: int, step: int):
    """Make ``token_id`` the top logit of the ``step``-th generated token (0-based) and no other."""
    calls = {"n": 0}

    def hook(_module, _inputs, output):
        if calls["n"] == step:
            output[:, -1, token_id] = output[:, -1].max() + 50.0
        calls["n"] += 1
        return output

    handle = model.lm_head.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def test_smollm2_ends_on_both_endoftext_and_im_end(policy):
    tokenizer = policy.tokenizer
    ids = {tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>")}
    assert ids == {0, 2}
    assert policy.eos_token_ids == ids
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") not in policy.eos_token_ids


@pytest.mark.parametrize("token", ["<|endoftext|>", "<|im_end|>"])
def test_generation_stops_at_each_end_token(policy, token):
    token_id = policy.tokenizer.convert_tokens_to_ids(token)
    with force_token_at(policy.model, token_id, step=3):
        (out,) = policy.generate([STORY], SamplingParams(max_tokens=30, temperature=0))
    assert out.finish_reason == "stop" and not out.truncated
    assert out.token_ids[-1] == token_id and len(out.token_ids) == 4
    assert len(out.logprobs) == 4
    assert token not in str(out)
    assert str(out) == policy.decode(out.token_ids[:-1])


def test_endoftext_in_a_batch_ends_only_its_row(policy):
    token_id = policy.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    with force_token_at(policy.model, token_id, step=2):  # every row's 3rd token
        outs = policy.generate([STORY, STORY], SamplingParams(max_tokens=8, temperature=0))
    assert [o.token_ids[-1] for o in outs] == [token_id, token_id]
    assert all(o.finish_reason == "stop" and len(o.token_ids) == 3 for o in outs)
    (free,) = policy.generate([STORY], SamplingParams(max_tokens=8, temperature=0))
    assert free.finish_reason == "length" and token_id not in free.token_ids


def test_plain_text_lookalike_is_not_an_end_token():
    """Only special tokens count: a vocabulary entry spelled "</s>" that is not special does not end."""

    class Tokenizer:
        eos_token_id = 7
        all_special_tokens = ("<|im_end|>",)

        def __init__(self):
            self.added_tokens_decoder = {}
            self.vocab = {"<|im_end|>": 7, "</s>": 9, "<|endoftext|>": 11}

        def convert_tokens_to_ids(self, token):
            return self.vocab[token]

        def convert_ids_to_tokens(self, token_id):
            return {v: k for k, v in self.vocab.items()}[token_id]

    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[7, 13]), config=None)
    assert end_token_ids(model, Tokenizer()) == {7, 13}
