"""MOPD end to end on the tiny model: a student distilled toward a teacher that always says "yes",
teachers loaded once and run once per step, config rules, masked-reward samples, metrics."""

from __future__ import annotations

import itertools
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from cascade_envs.trainer.checks import config_from_dict, load_config  # noqa: E402
from cascade_envs.trainer.config import ConfigError  # noqa: E402
from cascade_envs.trainer.loop import Trainer, warmup_lr  # noqa: E402
from tests.trainer.toys import PROMPTS, WORDS, tiny_model, tiny_tokenizer  # noqa: E402


def save_yes_teacher(folder: Path, seed: int = 1, steps: int = 60) -> Path:
    """A tiny model trained to predict "yes" after any context of the toy vocabulary."""
    tok = tiny_tokenizer()
    model = tiny_model(len(tok), seed=seed).train()
    gen = torch.Generator().manual_seed(seed)
    pool = torch.tensor(
        tok.convert_tokens_to_ids([*WORDS, "<|im_start|>", "user", "assistant", "<|im_end|>"])
    )
    yes = tok.convert_tokens_to_ids("yes")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        ids = pool[torch.randint(len(pool), (32, 16), generator=gen)]
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), torch.full((ids.numel(),), yes)
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def yes_teacher(tmp_path_factory) -> Path:
    return save_yes_teacher(tmp_path_factory.mktemp("teacher") / "yes")


@pytest.fixture(scope="module")
def other_teacher(tmp_path_factory) -> Path:
    from tests.trainer.toys import save_tiny

    return save_tiny(tmp_path_factory.mktemp("teacher") / "other", seed=2)


def mopd_config(
    student: Path,
    out: Path,
    teachers: dict[str, str],
    envs: dict[str, float] | None = None,
    **sections: dict[str, Any],
):
    data: dict[str, Any] = {
        "algorithm": "mopd",
        "model": {"path": str(student)},
        "mix": {"envs": envs or {"test/SayYes-v0": 1.0}},
        "mopd": {"teachers": teachers},
        "rollout": {"group_size": 1, "prompts_per_step": 16, "max_tokens": 6},
        "optim": {"lr": 3e-2, "micro_batch_size": 8},
        "train": {
            "steps": 8,
            "output_dir": str(out),
            "save_every": 100,
            "tensorboard": False,
            "progress": False,
            "plot": False,
        },
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return config_from_dict(data)


def exact_reverse_kl(student: Any, teacher: Any, tokenizer: Any) -> float:
    """KL(student || teacher) over the whole vocabulary at each toy prompt's first answer token."""
    total = 0.0
    with torch.no_grad():
        for prompt in PROMPTS:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
            ls = torch.log_softmax(student(input_ids=ids).logits[0, -1].float(), -1)
            lt = torch.log_softmax(teacher(input_ids=ids).logits[0, -1].float(), -1)
            total += float((ls.exp() * (ls - lt)).sum())
    return total / len(PROMPTS)


def test_distilling_toward_a_yes_teacher_lowers_the_reverse_kl_step_by_step(
    tiny_model_dir, yes_teacher, tmp_path
):
    config = mopd_config(tiny_model_dir, tmp_path / "run", {"test/SayYes-v0": str(yes_teacher)})
    trainer = Trainer(config)
    (scorer,) = trainer.sources["teacher"].scorers.values()
    exact = [exact_reverse_kl(trainer.model, scorer.model, trainer.tokenizer)]
    logged = []
    for _ in range(8):
        metrics = trainer.train_step()
        logged.append(metrics["mopd/reverse_kl"])
        exact.append(exact_reverse_kl(trainer.model, scorer.model, trainer.tokenizer))
    trainer.close()
    # the exact KL at fixed contexts falls every step; the logged one (on each step's fresh samples)
    # falls with at most one blip, and both drop by far more than the noise
    assert all(b < a for a, b in itertools.pairwise(exact)), exact
    assert exact[-1] < 0.1 * exact[0]
    assert sum(b > a for a, b in itertools.pairwise(logged)) <= 1, logged
    assert logged[-1] < 0.2 * logged[0]
    assert metrics["mopd/teacher_top1_agreement"] > 0.8  # the student now samples what the teacher prefers
    for key in (
        "mopd/gated_fraction",
        "mopd/reverse_kl",
        "mopd/teacher_top1_agreement",
        "mopd/advantage_mean/test/SayYes-v0",
    ):
        assert key in metrics
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all("mopd/advantage_mean/test/SayYes-v0" in row for row in rows)
    assert rows[0]["mopd/advantage_mean/test/SayYes-v0"] == pytest.approx(-rows[0]["mopd/reverse_kl"])
    assert 0.0 <= rows[0]["mopd/gated_fraction"] <= 1.0


def test_group_size_one_is_for_mopd_not_grpo(tiny_model_dir, yes_teacher, tmp_path):
    config = mopd_config(
        tiny_model_dir,
        tmp_path / "run",
        {"test/SayYes-v0": str(yes_teacher)},
        rollout={"group_size": 1, "prompts_per_step": 512},
    )
    assert config.rollout.group_size == 1
    with pytest.raises(ConfigError, match="GRPO compares rollouts"):
        config_from_dict(
            {
                "model": {"path": str(tiny_model_dir)},
                "mix": {"envs": {"test/SayYes-v0": 1.0}},
                "rollout": {"group_size": 1},
            }
        )


def test_each_teacher_is_loaded_once_and_runs_once_per_step(
    tiny_model_dir, yes_teacher, other_teacher, tmp_path, monkeypatch
):
    from cascade_envs.trainer import teachers as teachers_module

    loads: list[str] = []
    real_load = teachers_module.load_model

    def counting_load(config, path=None):
        loads.append(config.path)
        return real_load(config, path)

    monkeypatch.setattr(teachers_module, "load_model", counting_load)
    envs = {"test/SayYes-v0": 1.0, "test/Constant-v0": 1.0, "test/HalfBroken-v0": 1.0}
    teachers = {"test/SayYes-v0": str(yes_teacher), "test/HalfBroken-v0": str(other_teacher)}
    config = mopd_config(
        tiny_model_dir,
        tmp_path / "run",
        teachers,
        envs,
        mopd={"teachers": teachers, "default_teacher": str(yes_teacher)},
        rollout={"group_size": 2, "prompts_per_step": 12},
        optim={"micro_batch_size": 4},
    )
    trainer = Trainer(config)
    assert sorted(loads) == sorted([str(yes_teacher), str(other_teacher)])  # Constant shares the yes teacher
    pool = trainer.sources["teacher"]
    assert (
        pool.scorer_of("test/Constant-v0")
        == pool.scorer_of("test/SayYes-v0")
        != pool.scorer_of("test/HalfBroken-v0")
    )
    calls: dict[str, list[set[str]]] = {}
    forwards: dict[str, int] = {}
    for key, scorer in pool.scorers.items():
        real_score, model = scorer.score, scorer.model

        def score(sequences, key=key, real_score=real_score):
            calls.setdefault(key, []).append({s.env_id for s in sequences})
            return real_score(sequences)

        def count_forward(module, args, kwargs, key=key):
            forwards[key] = forwards.get(key, 0) + 1

        scorer.score = score  # type: ignore[method-assign]
        model.register_forward_pre_hook(count_forward, with_kwargs=True)
    for step in range(2):
        trainer.train_step()
        assert {key: len(c) for key, c in calls.items()} == {key: step + 1 for key in pool.scorers}
    trainer.close()
    yes_key, other_key = pool.scorer_of("test/SayYes-v0"), pool.scorer_of("test/HalfBroken-v0")
    assert all(envs_seen <= {"test/SayYes-v0", "test/Constant-v0"} for envs_seen in calls[yes_key])
    assert all(envs_seen == {"test/HalfBroken-v0"} for envs_seen in calls[other_key])
    assert forwards[yes_key] > 0 and forwards[other_key] > 0


def test_a_mix_env_without_a_teacher_is_a_config_error(tiny_model_dir, yes_teacher, tmp_path):
    with pytest.raises(ConfigError, match=r"mopd\.teachers has no teacher for mix env\(s\) test/Constant-v0"):
        mopd_config(
            tiny_model_dir,
            tmp_path / "run",
            {"test/SayYes-v0": str(yes_teacher)},
            {"test/SayYes-v0": 1.0, "test/Constant-v0": 1.0},
        )
    config = mopd_config(
        tiny_model_dir,
        tmp_path / "run",
        {"test/SayYes-v0": str(yes_teacher)},
        {"test/SayYes-v0": 1.0, "test/Constant-v0": 1.0},
        mopd={"teachers": {"test/SayYes-v0": str(yes_teacher)}, "default_teacher": str(yes_teacher)},
    )
    assert config.mopd.default_teacher == str(yes_teacher)


@pytest.mark.parametrize("resize", [True, False], ids=["vocabulary-size", "tokenizer-only"])
def test_a_teacher_with_another_vocabulary_is_a_config_error(tiny_model_dir, tmp_path, resize):
    tok = tiny_tokenizer()
    size = len(tok)
    tok.add_tokens(["zebra"])
    model = tiny_model(len(tok) if resize else size, seed=3)
    folder = tmp_path / "teacher"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    config = mopd_config(tiny_model_dir, tmp_path / "run", {"test/SayYes-v0": str(folder)})
    with pytest.raises(ConfigError, match=r"mopd\.teachers\.test/SayYes-v0 .*share the student's tokenizer"):
        Trainer(config)


def test_masked_reward_samples_still_train_under_mopd(tiny_model_dir, yes_teacher, tmp_path):
    config = mopd_config(
        tiny_model_dir,
        tmp_path / "run",
        {"test/HalfBroken-v0": str(yes_teacher)},
        {"test/HalfBroken-v0": 1.0},
        rollout={"group_size": 2, "prompts_per_step": 8},
    )
    trainer = Trainer(config)
    metrics = trainer.train_step()
    trainer.close()
    assert metrics["rollout/masked"] > 0  # the verifier failed on some answers ...
    assert metrics["batch/samples_masked"] == 0  # ... and they were trained on all the same
    assert metrics["batch/sequences"] == 16
    assert metrics["batch/groups_kept"] == 8


def test_dynamic_filtering_does_not_apply_and_mask_groups_below_is_refused(
    tiny_model_dir, yes_teacher, tmp_path
):
    teachers = {"test/Constant-v0": str(yes_teacher)}
    config = mopd_config(
        tiny_model_dir,
        tmp_path / "run",
        teachers,
        {"test/Constant-v0": 1.0},
        rollout={"group_size": 2, "prompts_per_step": 4, "dynamic_filtering": True},
    )
    trainer = Trainer(config)
    metrics = trainer.train_step()  # every reward is 0: GRPO would filter every group
    trainer.close()
    assert metrics["batch/groups_filtered"] == 0 and metrics["batch/groups_kept"] == 4
    assert "skipped" not in metrics
    with pytest.raises(ConfigError, match=r"rollout\.mask_groups_below does not apply to this algorithm"):
        mopd_config(
            tiny_model_dir,
            tmp_path / "run",
            teachers,
            {"test/Constant-v0": 1.0},
            rollout={"mask_groups_below": 0.5},
        )


@pytest.mark.parametrize(
    ("mopd", "match"),
    [
        ({"eps_low": 0.0}, r"mopd\.eps_low must be a finite number in \(0, 1\]"),
        ({"eps_low": 1.5}, r"mopd\.eps_low"),
        ({"eps_high": 0.9}, r"mopd\.eps_high must be a finite number >= 1"),
        ({"normalization": "batch"}, r"mopd\.normalization must be response or token"),
        ({"teacher_dtype": "int8"}, r"mopd\.teacher_dtype"),
        ({"teachers": {"test/SayYes-v0": "/no/such/folder"}}, r"mopd\.teachers\.test/SayYes-v0: model path"),
        (
            {"teachers": {"test/SayYes-v0": "auto"}},
            r"mopd\.teachers\.test/SayYes-v0: 'auto' is resolved only by a cascade",
        ),
        (
            {"teachers": {"test/SayYes-v0": 3}},
            r"mopd\.teachers\.test/SayYes-v0 must be a teacher checkpoint folder",
        ),
    ],
)
def test_mopd_settings_are_checked_naming_the_key(tiny_model_dir, yes_teacher, tmp_path, mopd, match):
    section = {"teachers": {"test/SayYes-v0": str(yes_teacher)}, **mopd}
    with pytest.raises(ConfigError, match=match):
        mopd_config(tiny_model_dir, tmp_path / "run", section["teachers"], mopd=section)


def test_ray_section_is_validated():
    config = config_from_dict(
        {"mix": {"envs": {"cascade/MCQA-v0": 1.0}}, "ray": {"address": "auto", "env_actors": 4}}
    )
    assert config.ray.address == "auto" and config.ray.env_actors == 4 and config.ray.actor_options == {}
    assert config_from_dict({"mix": {"envs": {"cascade/MCQA-v0": 1.0}}}).ray.address is None
    with pytest.raises(ConfigError, match=r"ray\.env_actors must be >= 0"):
        config_from_dict({"mix": {"envs": {"cascade/MCQA-v0": 1.0}}, "ray": {"env_actors": -1}})


MOPD_YAML = str(resources.files("cascade_envs.trainer").joinpath("configs/mopd.yaml"))


def test_shipped_mopd_stage_needs_its_teachers_set_when_loaded_alone():
    with pytest.raises(ConfigError) as info:
        load_config(MOPD_YAML)
    message = str(info.value)
    assert "\n" not in message and "only by a cascade pipeline" in message
    assert "mopd.teachers.cascade/Math-v0" in message and "--set" in message


def test_shipped_mopd_stage_follows_the_recipe(tiny_model_dir):
    import cascade_envs

    envs = [
        "cascade/InstructionFollowing-v0",
        "cascade/MCQA-v0",
        "cascade/Workplace-v0",
        "cascade/StructuredOutput-v0",
        "cascade/Math-v0",
    ]
    config = load_config(MOPD_YAML, [f"mopd.teachers.{env}={tiny_model_dir}" for env in envs])
    weights, _ = config.mix_weights()
    assert sorted(weights) == sorted(envs) and all(env in cascade_envs.env_specs() for env in envs)
    assert config.algorithm == "mopd" and config.mopd.eps_low == 0.5 and config.mopd.eps_high == 2.0
    assert config.mopd.normalization == "response"
    assert (config.rollout.prompts_per_step, config.rollout.group_size) == (128, 4)
    assert (config.rollout.temperature, config.rollout.top_p) == (1.0, 1.0)
    assert config.train.steps == 50
    o = config.optim
    assert (o.lr, o.warmup_start_lr, o.warmup_steps) == (2e-6, 2e-7, 30)
    # linear from 2e-7 at step 1 to 2e-6 at step 30, in equal increments, then flat
    lrs = [warmup_lr(o, step) for step in range(1, 33)]
    assert lrs[0] == pytest.approx(2e-7) and lrs[29] == pytest.approx(2e-6) and lrs[30:] == [2e-6, 2e-6]
    increments = [b - a for a, b in itertools.pairwise(lrs[:30])]
    assert all(d == pytest.approx((2e-6 - 2e-7) / 29) for d in increments)
    assert lrs[28] < 2e-6  # still climbing on step 29
