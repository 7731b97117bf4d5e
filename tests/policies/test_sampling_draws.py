"""The per-row sampler draws each token with its probability, from the row's own seed."""

import math

import pytest

torch = pytest.importorskip("torch")

from cascade_envs.policies.decoding import GenRequest, RowSampler  # noqa: E402

# Token 3 has probability 0 (a -inf logit); the others 0.5, 0.3, 0.15, 0.05.
PROBS = [0.5, 0.3, 0.15, 0.0, 0.05]
ROWS = 4000


def draw(requests: list[GenRequest], probs: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """One sampling step of ``RowSampler`` on the same scores in every row: (tokens, logprobs)."""
    logits = torch.tensor([math.log(p) if p > 0 else float("-inf") for p in probs])
    sampler = RowSampler(requests, torch.device("cpu"))
    return sampler.draw(logits.repeat(len(requests), 1), list(range(len(requests))))


def request(seed: int, temperature: float = 1.0, top_p: float = 1.0) -> GenRequest:
    return GenRequest(prompt_ids=[1], max_tokens=1, temperature=temperature, top_p=top_p, seed=seed)


def test_draws_follow_the_probabilities_and_never_pick_a_zero_probability_token():
    tokens, logprobs = draw([request(seed) for seed in range(ROWS)], PROBS)
    freq = torch.bincount(tokens, minlength=len(PROBS)).double() / ROWS
    assert freq[3] == 0
    for p, f in zip(PROBS, freq.tolist(), strict=True):
        assert abs(f - p) < 5 * math.sqrt(p * (1 - p) / ROWS) + 1e-12, (PROBS, freq.tolist())
    expected = torch.tensor([math.log(p) if p > 0 else float("-inf") for p in PROBS])[tokens]
    assert torch.allclose(logprobs, expected.float(), atol=1e-6)


def test_a_row_draws_the_same_token_whatever_shares_its_batch():
    alone, _ = draw([request(7)], PROBS)
    together, _ = draw([request(3, temperature=0), request(11, top_p=0.5), request(7)], PROBS)
    seeds = [draw([request(7 + k)], PROBS)[0].item() for k in range(40)]
    assert together[2] == alone[0]
    assert together[0] == 0  # greedy row: the argmax
    assert len(set(seeds)) > 1  # the seed matters


def test_top_p_keeps_only_the_nucleus_in_a_mixed_batch():
    # top_p 0.7: the nucleus is tokens 0 and 1 (0.5 + 0.3 >= 0.7), renormalised to 0.625 / 0.375
    requests = [request(seed, top_p=0.7) if seed % 2 else request(seed) for seed in range(ROWS)]
    tokens, logprobs = draw(requests, PROBS)
    nucleus, full = tokens[1::2], tokens[0::2]
    assert set(nucleus.tolist()) == {0, 1}
    share = (nucleus == 0).double().mean().item()
    assert abs(share - 0.625) < 5 * math.sqrt(0.625 * 0.375 / (ROWS / 2))
    assert {2, 4} <= set(full.tolist())
    # the reported logprob is the untruncated one (top-p shapes the draw, not the logprob)
    assert torch.allclose(
        logprobs[1::2], torch.tensor([math.log(PROBS[t]) for t in nucleus.tolist()]), atol=1e-6
    )


def test_a_vocabulary_of_several_blocks_is_drawn_with_its_probabilities():
    # 773 tokens: three full blocks of 256 and a short last one. Mass sits on a few tokens at block
    # edges (first and last of a block, the vocabulary's last token); every other token has a
    # -inf logit or one so low its probability underflows to 0.
    vocab = 3 * 256 + 5
    logits = torch.full((vocab,), float("-inf"))
    logits[1:200] = -200.0  # exp(-200 - peak) is 0 in float32: never drawn
    heavy = {0: 0.1, 255: 0.2, 256: 0.3, 767: 0.15, 772: 0.25}
    for token, p in heavy.items():
        logits[token] = math.log(p)
    rows = 8000
    sampler = RowSampler([request(seed) for seed in range(rows)], torch.device("cpu"))
    tokens, logprobs = sampler.draw(logits.repeat(rows, 1), list(range(rows)))
    assert set(tokens.tolist()) == set(heavy)
    for token, p in heavy.items():
        share = (tokens == token).double().mean().item()
        assert abs(share - p) < 5 * math.sqrt(p * (1 - p) / rows), (token, share)
    assert torch.allclose(logprobs, torch.log_softmax(logits, -1)[tokens], atol=1e-6)


@pytest.mark.parametrize("row", [[0.0] * 7 + [float("nan")] + [0.0] * 292, [float("-inf")] * 300])
def test_broken_logits_are_a_policy_error_not_a_token(row):
    from cascade_envs.policy import PolicyError

    logits = torch.stack([torch.zeros(300), torch.tensor(row)])
    with pytest.raises(PolicyError, match="NaN or all -inf"):
        RowSampler([request(1), request(2)], torch.device("cpu")).draw(logits, [0, 1])
