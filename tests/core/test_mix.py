import logging
from collections import Counter

import pytest

from cascade_envs import CascadeError
from cascade_envs.mix import EnvMix, normalise_weights

TASKS = [{"id": str(i), "prompt": f"q{i} ANSWER: {i}", "answer": str(i)} for i in range(10)]
KW = {"toy/ExactAnswer-v0": {"tasks": TASKS}, "toy/LookupTool-v0": {"tasks": TASKS[:3]}}


def test_weights_are_normalised_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        assert normalise_weights({"a": 2, "b": 6}) == {"a": 0.25, "b": 0.75}
    assert "normalising" in caplog.text


@pytest.mark.parametrize("weights", [{"a": -1, "b": 2}, {"a": 0}, {}, {"a": float("nan")}, {"a": "x"}])
def test_bad_weights_are_errors(weights):
    with pytest.raises(CascadeError):
        normalise_weights(weights)


def test_sampling_is_seeded_and_follows_the_weights():
    mix = EnvMix({"toy/ExactAnswer-v0": 0.8, "toy/LookupTool-v0": 0.2}, seed=3, env_kwargs=KW)
    items = mix.sample(1000)
    again = EnvMix({"toy/ExactAnswer-v0": 0.8, "toy/LookupTool-v0": 0.2}, seed=3, env_kwargs=KW).sample(1000)
    assert [(e, t["id"]) for e, t in items] == [(e, t["id"]) for e, t in again]
    share = Counter(e for e, _ in items)["toy/ExactAnswer-v0"] / 1000
    assert 0.75 < share < 0.85


def test_tasks_are_drawn_without_replacement_per_pass():
    mix = EnvMix(["toy/ExactAnswer-v0"], seed=0, env_kwargs=KW)
    ids = [t["id"] for _, t in mix.sample(10)]
    assert sorted(ids) == sorted(t["id"] for t in TASKS)


def test_state_dict_resumes_the_same_stream():
    mix = EnvMix(["toy/ExactAnswer-v0", "toy/LookupTool-v0"], seed=1, env_kwargs=KW)
    mix.sample(7)
    state = mix.state_dict()
    expected = [t["id"] for _, t in mix.sample(5)]
    other = EnvMix(["toy/ExactAnswer-v0", "toy/LookupTool-v0"], seed=99, env_kwargs=KW)
    other.load_state_dict(state)
    assert [t["id"] for _, t in other.sample(5)] == expected


def test_env_without_tasks_is_an_error():
    with pytest.raises(CascadeError, match="has no tasks"):
        EnvMix(["toy/ExactAnswer-v0"])


def test_all_tasks():
    mix = EnvMix(["toy/ExactAnswer-v0", "toy/LookupTool-v0"], env_kwargs=KW)
    assert len(mix.all_tasks()) == 13 and len(mix.all_tasks(limit=2)) == 4
