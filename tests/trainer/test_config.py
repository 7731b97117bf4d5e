"""Typed trainer config: YAML loading, overrides, validation, shipped configs."""

from __future__ import annotations

import os
import re
from importlib import resources

import pytest

from cascade_envs.trainer.checks import config_from_dict, load_config
from cascade_envs.trainer.config import ConfigError
from cascade_envs.trainer.typed_yaml import parse_override


def test_default_config_loads_and_names_existing_envs():
    import cascade_envs

    config = load_config(None)
    weights, _ = config.mix_weights()
    assert config.model.path == "embedded"
    for env_id in weights:
        assert env_id in cascade_envs.env_specs(), env_id
    assert 1e-5 <= config.optim.lr <= 4e-5  # the default run must visibly learn in a few minutes


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
    assert weights == pytest.approx(
        {"cascade/MCQA-v0": 0.55, "cascade/Workplace-v0": 0.30, "cascade/StructuredOutput-v0": 0.15}
    )


def test_overrides_are_typed_and_nested():
    config = load_config(
        None, ["optim.lr=1e-5", "rollout.group_size=3", "train.steps=7", "rollout.thinking=false"]
    )
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
        ("optim.lr=-1", "optim.lr must be a finite number > 0"),
        ("rollout.engine=tgi", "rollout.engine must be hf, vllm or ray, got 'tgi'"),
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
        {
            "mix": {
                "envs": {"test/SayYes-v0": {"weight": 2, "kwargs": {"max_turns": 1}}, "test/Constant-v0": 1}
            }
        }
    )
    weights, kwargs = config.mix_weights()
    assert weights == {"test/SayYes-v0": 2, "test/Constant-v0": 1}
    assert kwargs["test/SayYes-v0"] == {"max_turns": 1}
    with pytest.raises(ConfigError, match="unknown key"):
        config_from_dict({"mix": {"envs": {"test/SayYes-v0": {"wieght": 2}}}}).mix_weights()


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["optim.lr=.inf"], "optim.lr"),
        (["optim.lr=1e999"], "optim.lr"),
        (["optim.lr=.nan"], "optim.lr"),
        (["optim.lr=0"], "optim.lr"),
        (["rollout.temperature=-1"], "rollout.temperature"),
        (["rollout.temperature=.inf"], "rollout.temperature"),
        (["rollout.top_p=0"], "rollout.top_p"),
        (["rollout.top_p=1.5"], "rollout.top_p"),
        (["rollout.top_p=.nan"], "rollout.top_p"),
        (["optim.betas=[0.9, 1.0]"], "optim.betas[1]"),
        (["optim.betas=[-0.1, 0.999]"], "optim.betas[0]"),
        (["optim.eps=0"], "optim.eps"),
        (["optim.eps=.inf"], "optim.eps"),
        (["optim.max_grad_norm=0"], "optim.max_grad_norm"),
        (["optim.max_grad_norm=.inf"], "optim.max_grad_norm"),
        (["optim.weight_decay=-0.01"], "optim.weight_decay"),
        (["optim.weight_decay=.nan"], "optim.weight_decay"),
        (["optim.kl_coef=-0.1"], "optim.kl_coef"),
        (["optim.kl_coef=.inf"], "optim.kl_coef"),
        (["optim.warmup_steps=-1"], "optim.warmup_steps"),
        (["optim.warmup_start_lr=-1e-7"], "optim.warmup_start_lr"),
        (["optim.warmup_steps=10", "optim.warmup_start_lr=1.0"], "optim.warmup_start_lr"),
        (["train.seed=-1"], "train.seed"),
        (["train.seed=4294967296"], "train.seed"),
        (["mix.seed=-5"], "mix.seed"),
        (["model.dtype=fp8"], "model.dtype"),
        (["model.device=gpu0"], "model.device"),
        (["model.path="], "model.path"),
        (["train.output_dir="], "train.output_dir"),
    ],
)
def test_settings_that_would_ruin_a_run_are_refused_naming_the_key(overrides, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_config(None, overrides)


def test_edge_values_that_make_sense_are_accepted(tmp_path):
    config = load_config(
        None,
        [
            "rollout.temperature=0",
            "rollout.top_p=1",
            "optim.betas=[0, 0.999]",
            "optim.weight_decay=0",
            "optim.warmup_steps=3",
            "optim.warmup_start_lr=3e-6",
            f"train.output_dir={tmp_path / 'a' / 'b'}",
            "train.seed=4294967295",
            "model.device=cpu",
        ],
    )
    assert config.rollout.temperature == 0 and config.rollout.top_p == 1
    assert not (tmp_path / "a").exists()  # validation creates nothing


def test_output_dir_must_be_creatable_and_writable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match=r"train\.output_dir .*not a directory"):
        load_config(None, [f"train.output_dir={blocker / 'run'}"])
    with pytest.raises(ConfigError, match=r"train\.output_dir"):
        load_config(None, [f"train.output_dir={blocker}"])
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        try:
            with pytest.raises(ConfigError, match=r"train\.output_dir .*not writable"):
                load_config(None, [f"train.output_dir={locked / 'run'}"])
        finally:
            locked.chmod(0o700)


@pytest.mark.parametrize(("name", "steps"), [("if_rl.yaml", 180), ("multi_domain_rl.yaml", 70)])
def test_stage_configs_run_the_step_counts_of_the_recipe(name, steps):
    """../shared/RECIPE.md's stage table: IF-RL ~180 steps, multi-domain RL ~70."""
    path = resources.files("cascade_envs.trainer").joinpath(f"configs/{name}")
    assert load_config(str(path)).train.steps == steps


def test_mopd_and_ray_sections_have_documented_defaults_and_round_trip():
    config = config_from_dict({"mix": {"envs": {"cascade/MCQA-v0": 1.0}}})
    assert config.mopd.teachers == {} and config.mopd.default_teacher is None
    assert (config.mopd.eps_low, config.mopd.eps_high) == (0.5, 2.0)
    assert config.mopd.normalization == "response" and config.mopd.teacher_dtype == "auto"
    assert config.ray.address is None and config.ray.env_actors == 0 and config.ray.actor_options == {}
    again = config_from_dict(config.to_dict())
    assert again.mopd == config.mopd and again.ray == config.ray
    with pytest.raises(ConfigError, match=r"unknown config key 'mopd\.eps_lo'; did you mean 'eps_low'"):
        config_from_dict({"mix": {"envs": {"cascade/MCQA-v0": 1.0}}, "mopd": {"eps_lo": 0.4}})


def test_a_config_changed_in_code_is_checked_like_a_file():
    from cascade_envs.trainer.checks import validate

    config = load_config(None)
    config.rollout.engine = "tgi"
    with pytest.raises(ConfigError, match=r"rollout\.engine must be hf, vllm or ray, got 'tgi'"):
        validate(config)
    config.rollout.engine = "hf"
    config.optim.betas = (0.9, 0.99)
    with pytest.raises(ConfigError, match=r"optim\.betas: expected a list"):
        validate(config)


def test_each_section_checks_its_own_values():
    from cascade_envs.trainer.config import MOPDConfig, RolloutConfig

    with pytest.raises(ConfigError, match=r"rollout\.prompts_per_step must be at least 1, got 0"):
        RolloutConfig(prompts_per_step=0).check()
    with pytest.raises(ConfigError, match=r"mopd\.eps_high must be a finite number >= 1"):
        MOPDConfig(eps_high=0.5).check()
    assert [type(s).__name__ for s in load_config(None).sections()] == [
        "ModelConfig",
        "MixConfig",
        "RolloutConfig",
        "OptimConfig",
        "TrainConfig",
        "HeldoutConfig",
        "MOPDConfig",
        "RayConfig",
    ]
