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
    assert [(e, t.task_id) for e, t in items] == [(e, t.task_id) for e, t in again]
    share = Counter(e for e, _ in items)["toy/ExactAnswer-v0"] / 1000
    assert 0.75 < share < 0.85


def test_tasks_are_drawn_without_replacement_per_pass():
    mix = EnvMix(["toy/ExactAnswer-v0"], seed=0, env_kwargs=KW)
    ids = [t.task_id for _, t in mix.sample(10)]
    assert sorted(ids) == sorted(t["id"] for t in TASKS)


def test_state_dict_resumes_the_same_stream():
    mix = EnvMix(["toy/ExactAnswer-v0", "toy/LookupTool-v0"], seed=1, env_kwargs=KW)
    mix.sample(7)
    state = mix.state_dict()
    expected = [t.task_id for _, t in mix.sample(5)]
    other = EnvMix(["toy/ExactAnswer-v0", "toy/LookupTool-v0"], seed=99, env_kwargs=KW)
    other.load_state_dict(state)
    assert [t.task_id for _, t in other.sample(5)] == expected


def test_env_without_tasks_is_an_error():
    with pytest.raises(CascadeError, match="has no tasks"):
        EnvMix(["toy/ExactAnswer-v0"])


def test_all_tasks():
    mix = EnvMix(["toy/ExactAnswer-v0", "toy/LookupTool-v0"], env_kwargs=KW)
    assert len(mix.all_tasks()) == 13 and len(mix.all_tasks(limit=2)) == 4


# --- the one mix parser (eval --mix and the trainer's mix.envs) ---


def test_parse_mix_reads_both_entry_forms():
    from cascade_envs.mix import parse_mix

    weights, kwargs = parse_mix(
        {
            "toy/A-v0": 2,
            "toy/B-v0": {"weight": 0.5, "kwargs": {"tasks": "t.jsonl"}},
            "toy/C-v0": {"kwargs": None},
            "toy/D-v0": "1e-3",
        }
    )
    assert weights == {"toy/A-v0": 2.0, "toy/B-v0": 0.5, "toy/C-v0": 1.0, "toy/D-v0": 0.001}
    assert kwargs == {"toy/A-v0": {}, "toy/B-v0": {"tasks": "t.jsonl"}, "toy/C-v0": {}, "toy/D-v0": {}}
    assert all(isinstance(w, float) for w in weights.values())


@pytest.mark.parametrize(
    ("envs", "match"),
    [
        ([1, 2], r"^mix\.envs: expected a mapping"),
        ({}, r"^mix\.envs is empty"),
        ({"NoNamespace": 1}, r"env id 'NoNamespace' must look like 'namespace/Name-vN'"),
        ({3: 1}, r"env id 3 must look like"),
        ({"toy/A-v0": {"wieght": 2}}, r"^mix\.envs\.toy/A-v0: unknown key 'wieght'; did you mean 'weight'\?"),
        ({"toy/A-v0": {"kwarg": {}}}, r"unknown key 'kwarg'; did you mean 'kwargs'\?"),
        ({"toy/A-v0": {"zzz": 1}}, r"unknown key 'zzz' \(known: weight, kwargs, env\)"),
        ({"toy/A-v0": -1}, r"^mix\.envs\.toy/A-v0 is negative \(-1"),
        ({"toy/A-v0": {"weight": -0.5}}, r"^mix\.envs\.toy/A-v0\.weight is negative"),
        ({"toy/A-v0": float("nan")}, r"toy/A-v0 must be a finite number, got nan"),
        ({"toy/A-v0": {"weight": float("inf")}}, r"toy/A-v0\.weight must be a finite number, got inf"),
        ({"toy/A-v0": {"weight": "heavy"}}, r"must be a finite number, got 'heavy'"),
        ({"toy/A-v0": True}, r"expected a weight or \{weight: W, kwargs: \{\.\.\.\}\}, got True"),
        ({"toy/A-v0": None}, r"expected a weight or"),
        ({"toy/A-v0": {"weight": True}}, r"toy/A-v0\.weight must be a finite number, got True"),
        (
            {"toy/A-v0": {"kwargs": [1]}},
            r"^mix\.envs\.toy/A-v0\.kwargs: expected a mapping of keyword arguments",
        ),
        ({"toy/A-v0": {"kwargs": {1: 2}}}, r"toy/A-v0\.kwargs: keyword names must be strings"),
        ({"toy/A-v0": 0, "toy/B-v0": 0.0}, r"^mix\.envs: the weights sum to zero"),
        (
            {"toy/A-v0": {"env": "toy/NoSuch-v0"}},
            r"^mix\.envs\.toy/A-v0\.env: unknown environment 'toy/NoSuch-v0'",
        ),
        ({"toy/A-v0": {"env": 3}}, r"toy/A-v0\.env: expected a registered env id"),
        (
            {"toy/LookupTool-v0": {"env": "toy/ExactAnswer-v0"}},
            r"'toy/LookupTool-v0' is already a registered env; give this entry another id",
        ),
    ],
)
def test_parse_mix_errors_name_the_key(envs, match):
    from cascade_envs.mix import parse_mix

    with pytest.raises(CascadeError, match=match):
        parse_mix(envs)


def test_parse_mix_source_prefix():
    from cascade_envs.mix import parse_mix

    with pytest.raises(CascadeError, match=r"^--mix: toy/A-v0 is negative"):
        parse_mix({"toy/A-v0": -1}, source="--mix:")
    with pytest.raises(CascadeError, match=r"^run\.yaml: envs\.toy/A-v0\.weight"):
        parse_mix({"toy/A-v0": {"weight": "x"}}, source="run.yaml: envs")


def test_load_mix_file(tmp_path):
    from cascade_envs.mix import load_mix_file

    path = tmp_path / "mix.yaml"
    path.write_text("envs:\n  toy/A-v0: 0.55\n  toy/B-v0: {weight: 3e-1, kwargs: {tasks: t.jsonl}}\n")
    assert load_mix_file(path) == (
        {"toy/A-v0": 0.55, "toy/B-v0": 0.3},
        {"toy/A-v0": {}, "toy/B-v0": {"tasks": "t.jsonl"}},
    )
    for text, match in [
        ("envs: [1, 2", "not valid YAML"),
        ("- 1\n", "expected a mapping 'envs:"),
        ("env: {toy/A-v0: 1}\n", "expected a mapping 'envs:"),
        ("envs: {toy/A-v0: 1}\nenvz: 2\n", "unknown key 'envz'; did you mean 'envs'"),
        ("envs: {toy/A-v0: {wieght: 1}}\n", r"mix\.yaml: envs\.toy/A-v0: unknown key 'wieght'"),
    ]:
        path.write_text(text)
        with pytest.raises(CascadeError, match=match):
            load_mix_file(path)
    with pytest.raises(CascadeError, match="cannot read mix file"):
        load_mix_file(tmp_path / "missing.yaml")


def test_eval_and_the_trainer_share_the_parser():
    from cascade_envs.mix import parse_mix
    from cascade_envs.trainer.checks import config_from_dict
    from cascade_envs.trainer.config import ConfigError

    envs = {"test/SayYes-v0": {"weight": 2, "kwargs": {"max_turns": 1}}, "test/Constant-v0": 1}
    config = config_from_dict({"mix": {"envs": envs}})
    assert config.mix_weights() == parse_mix(envs)
    with pytest.raises(ConfigError, match=r"mix\.envs\.test/SayYes-v0\.weight is negative"):
        config_from_dict({"mix": {"envs": {"test/SayYes-v0": {"weight": -1}}}})


def test_an_entry_plays_a_registered_env_under_an_id_of_its_own():
    """Two entries of one registered env with their own kwargs (e.g. two NeMo Gym servers through
    ``nemo-gym/Resources-v0``): each id is its own env in the mix, made with its own tasks."""
    from cascade_envs.mix import parse_mix
    from cascade_envs.registry import spec

    envs = {
        "mine/Small-v0": {"env": "toy/ExactAnswer-v0", "weight": 1, "kwargs": {"tasks": TASKS[:2]}},
        "mine/Large-v0": {"env": "toy/ExactAnswer-v0", "weight": 3, "kwargs": {"tasks": TASKS}},
    }
    weights, kwargs = parse_mix(envs)
    assert parse_mix(envs) == (weights, kwargs)  # parsing again (every rank parses) is fine
    assert spec("mine/Small-v0").entry_point == spec("toy/ExactAnswer-v0").entry_point
    mix = EnvMix(weights, seed=0, env_kwargs=kwargs)
    try:
        assert [len(mix.envs[i].tasks) for i in ("mine/Small-v0", "mine/Large-v0")] == [2, 10]
        assert mix.envs["mine/Small-v0"] is not mix.envs["mine/Large-v0"]
        assert Counter(e for e, _ in mix.sample(400))["mine/Large-v0"] > 250
    finally:
        mix.envs.close()
