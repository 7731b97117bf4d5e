"""Typed trainer config: YAML loading, overrides, validation, shipped configs."""

from __future__ import annotations

from importlib import resources

import pytest

from cascade_envs.trainer.config import ConfigError, config_from_dict, load_config, parse_override


def test_default_config_loads_and_names_existing_envs():
    import cascade_envs

    config = load_config(None)
    weights, _ = config.mix_weights()
    assert config.model.path == "embedded"
    for env_id in weights:
        assert env_id in cascade_envs.env_specs(), env_id
    assert config.optim.lr == pytest.approx(3e-6)


@pytest.mark.parametrize("name", ["default.yaml", "if_rl.yaml", "multi_domain_rl.yaml"])
def test_shipped_configs_are_valid(name):
    import cascade_envs

    path = resources.files("cascade_envs.trainer").joinpath(f"configs/{name}")
    config = load_config(str(path))
    weights, _ = config.mix_weights()
    assert all(env_id in cascade_envs.env_specs() for env_id in weights)
    assert config.optim.kl_coef == 0.0


def test_multi_domain_mix_weights_follow_the_report():
    path = resources.files("cascade_envs.trainer").joinpath("configs/multi_domain_rl.yaml")
    weights, _ = load_config(str(path)).mix_weights()
    assert sum(weights.values()) == pytest.approx(1.0)


def test_overrides_are_typed_and_nested():
    config = load_config(None, ["optim.lr=1e-5", "rollout.group_size=3", "train.steps=7", "rollout.thinking=false"])
    assert config.optim.lr == pytest.approx(1e-5)
    assert config.rollout.group_size == 3 and config.train.steps == 7
    _, kwargs = config.mix_weights()
    assert all(kw["thinking"] is False for kw in kwargs.values())
    assert parse_override("mix.envs={a/B-v0: 1}") == ("mix.envs", {"a/B-v0": 1})


def test_yaml_scientific_notation_is_a_number(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("mix: {envs: {test/SayYes-v0: 1}}\noptim: {lr: 3e-6}\n")
    assert load_config(path).optim.lr == pytest.approx(3e-6)


def test_unknown_key_suggests_the_right_one():
    with pytest.raises(ConfigError, match=r"unknown config key 'optim.learning_rat'.*|did you mean"):
        load_config(None, ["optim.learning_rat=1"])
    with pytest.raises(ConfigError, match="did you mean 'group_size'"):
        load_config(None, ["rollout.group_sise=4"])


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("optim.lr=fast", "expected a number"),
        ("rollout.group_size=2.5", "expected an integer"),
        ("rollout.group_size=1", "at least 2"),
        ("optim.lr=-1", "must be positive"),
        ("rollout.engine=tgi", "'hf' or 'vllm'"),
        ("train.steps", "key.sub=value"),
        ("mix.envs={}", "mix.envs is empty"),
        ("optim.betas=[0.9]", "two numbers"),
        ("model.mixed_precision=fp8", "mixed_precision"),
        ("model.gradient_checkpointing=sometimes", "gradient_checkpointing"),
    ],
)
def test_bad_values_are_clear_errors(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])


def test_missing_or_malformed_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(top)


def test_mix_entries_with_kwargs():
    config = config_from_dict(
        {"mix": {"envs": {"test/SayYes-v0": {"weight": 2, "kwargs": {"max_turns": 1}}, "test/Constant-v0": 1}}}
    )
    weights, kwargs = config.mix_weights()
    assert weights == {"test/SayYes-v0": 2, "test/Constant-v0": 1}
    assert kwargs["test/SayYes-v0"] == {"max_turns": 1}
    with pytest.raises(ConfigError, match="unknown key"):
        config_from_dict({"mix": {"envs": {"test/SayYes-v0": {"wieght": 2}}}}).mix_weights()
