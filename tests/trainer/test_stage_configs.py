"""The shipped Cascade RL stage configs and pipeline files load, and carry RECIPE.md's numbers."""

from __future__ import annotations

import pytest

from cascade_envs.registry import spec
from cascade_envs.trainer.cascade import find_config, load_pipeline, shipped_names
from cascade_envs.trainer.cascade_run import CascadeRunner
from cascade_envs.trainer.checks import load_config
from cascade_envs.trainer.config import Config, ConfigError
from cascade_envs.trainer.typed_yaml import read_yaml

STAGES = [
    "if_rl",
    "multi_domain_rl",
    "mopd",
    "rlhf",
    "long_context_rl",
    "code_rl",
    "swe_agentless_rl",
    "swe_rl",
]
JUDGED = {
    "rlhf": "cascade/GenRM-v0",
    "long_context_rl": "cascade/LongContextQA-v0",
    "swe_agentless_rl": "cascade/AgentlessRepair-v0",
}


def load_stage(name: str, model: str) -> Config:
    """The shipped stage config with the --set a user gives: the model, a judge, MOPD's teachers."""
    overrides = [f"model.path={model}"]
    if name in JUDGED:
        overrides.append(f"mix.envs.{JUDGED[name]}.kwargs.judge_url=http://127.0.0.1:8011/v1")
    if name == "mopd":
        overrides += [
            f"mopd.teachers.{env}={model}" for env in read_yaml(find_config(name))["mopd"]["teachers"]
        ]
    return load_config(find_config(name), overrides)


@pytest.fixture(scope="module")
def stages(tiny_model_dir) -> dict[str, Config]:
    return {name: load_stage(name, str(tiny_model_dir)) for name in STAGES if name != "mopd"}


def test_every_stage_config_is_shipped_under_its_name_and_loads(tiny_model_dir):
    assert set(STAGES) | {"cascade", "cascade_demo", "default"} <= set(shipped_names())
    for name in STAGES:
        if name == "mopd":
            with pytest.raises(ConfigError, match="'auto' is resolved only by a cascade pipeline"):
                load_config(find_config(name), [f"model.path={tiny_model_dir}"])
            continue
        config = load_stage(name, str(tiny_model_dir))
        assert (
            config.rollout.temperature == 1.0 and config.rollout.top_p == 1.0
        )  # RECIPE.md: every GRPO stage
        assert config.model.path == str(tiny_model_dir)


def test_stage_numbers_match_the_recipe(stages):
    r = {name: c.rollout for name, c in stages.items()}
    o = {name: c.optim for name, c in stages.items()}
    for name in set(stages) - {"swe_rl"}:  # 128 prompts x 16 rollouts, lr 3e-6 in RECIPE.md's table
        assert (r[name].prompts_per_step, r[name].group_size, o[name].lr) == (128, 16, 3e-6), name
        assert o[name].kl_coef == (0.03 if name == "rlhf" else 0.0), name
    steps = {name: c.train.steps for name, c in stages.items()}
    assert steps["if_rl"] == 180 and steps["multi_domain_rl"] == 70 and steps["rlhf"] == 30
    assert steps["long_context_rl"] == 30 and 40 <= steps["swe_agentless_rl"] <= 50
    assert r["if_rl"].thinking is True and r["if_rl"].dynamic_filtering is True
    assert r["rlhf"].thinking is True and r["rlhf"].max_tokens == 16384
    assert stages["multi_domain_rl"].mix_weights()[0] == {
        "cascade/MCQA-v0": 0.55,
        "cascade/Workplace-v0": 0.30,
        "cascade/StructuredOutput-v0": 0.15,
    }
    _, kwargs = stages["rlhf"].mix_weights()
    assert kwargs["cascade/GenRM-v0"]["strategy"] == "all_pairs"
    _, kwargs = stages["long_context_rl"].mix_weights()
    assert kwargs["cascade/LongContextQA-v0"]["max_input_tokens"] == 32768
    long_context = spec("cascade/LongContextQA-v0").load()
    assert long_context.max_episode_tokens == 49152 == 32768 + r["long_context_rl"].max_tokens
    assert r["code_rl"].max_tokens == 118784  # "118K", read as 116 x 1024
    assert r["swe_agentless_rl"].mask_groups_below == 0.5 and r["if_rl"].mask_groups_below is None
    assert spec("cascade/AgentlessRepair-v0").load().max_episode_tokens == 98304
    assert (r["swe_rl"].prompts_per_step, r["swe_rl"].group_size) == (16, 64)  # RECIPE.md: 16 x 64
    _, kwargs = stages["swe_rl"].mix_weights()
    assert (kwargs["cascade/SWE-v0"]["max_turns"], kwargs["cascade/SWE-v0"]["max_episode_tokens"]) == (
        200,
        262144,
    )


def test_judged_stages_default_to_no_judge_and_mopd_to_recipe(tiny_model_dir):
    for name, env_id in JUDGED.items():
        _, kwargs = load_config(find_config(name), [f"model.path={tiny_model_dir}"]).mix_weights()
        assert kwargs[env_id].get("judge_url") is None, name  # never a hosted default
    mopd = load_stage("mopd", str(tiny_model_dir))
    assert (mopd.rollout.prompts_per_step, mopd.rollout.group_size) == (128, 4)
    assert (mopd.optim.lr, mopd.optim.warmup_start_lr, mopd.optim.warmup_steps) == (2e-6, 2e-7, 30)
    assert (mopd.mopd.eps_low, mopd.mopd.eps_high) == (0.5, 2.0) and 40 <= mopd.train.steps <= 50


@pytest.mark.parametrize("name", ["cascade", "cascade_demo"])
def test_pipeline_files_load_and_every_stage_builds(name, tiny_model_dir, tmp_path):
    pipeline = load_pipeline(find_config(name), [f"model.path={tiny_model_dir}", f"output_dir={tmp_path}"])
    CascadeRunner(pipeline).check()  # every stage config builds, MOPD's auto teachers are all evaluated
    names = [s.name for s in pipeline.stages]
    assert (
        names
        == [
            "if_rl",
            "multi_domain_rl",
            "rlhf_teacher",
            "mopd",
            "rlhf",
            "long_context_rl",
            "code_rl",
            "swe_agentless_rl",
            "swe_rl",
        ][: len(names)]
    )  # RECIPE.md's order; the demo has no swe_rl
    assert name == "cascade_demo" or names[-1] == "swe_rl"
    branch = pipeline.stage("rlhf_teacher")
    assert (branch.config, branch.init, branch.chain) == ("rlhf", "start", False)
    assert [s.config for s in pipeline.stages if s.name != "rlhf_teacher"] == STAGES[: len(names) - 1]
    if name == "cascade":
        assert pipeline.spec.eval.group_sizes == {"cascade/GenRM-v0": 2}  # GenRM masks an answer alone
