"""The held-out check (base vs trained, greedy) and the default run's easy instruction rows."""

from __future__ import annotations

import json

import pytest

from cascade_envs.data import prompt_messages
from cascade_envs.trainer.checks import load_config
from cascade_envs.trainer.config import ConfigError
from cascade_envs.trainer.metrics import heldout_line


def test_heldout_is_scored_before_the_first_step_and_after_the_last(make_config):
    from cascade_envs.trainer.loop import Trainer

    config = make_config(heldout={"env": "test/SayYes-v0"}, train={"steps": 2})
    trainer = Trainer(config)
    try:
        again = None
        history = trainer.train()
        again = trainer.evaluate_heldout()
    finally:
        trainer.close()
    assert len(history) == 2
    base, trained = trainer.heldout["base"], trainer.heldout["trained"]
    assert (base["step"], trained["step"]) == (0, 2)
    assert base["questions"] == trained["questions"] == 6 and base["masked"] == 0  # every SayYes task, once
    assert 0.0 <= base["mean"] <= 1.0 and base["sampling"] == "greedy"
    assert (
        again is not None and again["mean"] == trained["mean"]
    )  # greedy: the same weights give the same score
    written = json.loads((trainer.output_dir / "heldout.json").read_text())
    assert written["base"]["mean"] == base["mean"] and written["trained"]["mean"] == trained["mean"]
    line = heldout_line(trainer.heldout)
    assert line is not None and line.startswith(
        "held-out (6 questions of test/SayYes-v0 never trained on, greedy)"
    )
    assert f"base {base['mean']:.3f} -> trained {trained['mean']:.3f}" in line


def test_no_heldout_env_means_no_check(make_config):
    from cascade_envs.trainer.loop import Trainer

    trainer = Trainer(make_config(train={"steps": 0}))
    try:
        trainer.train()
        assert trainer.evaluate_heldout() is None
    finally:
        trainer.close()
    assert trainer.heldout == {} and heldout_line(trainer.heldout) is None
    assert not (trainer.output_dir / "heldout.json").exists()


def test_heldout_settings_are_checked():
    with pytest.raises(ConfigError, match="heldout"):
        load_config(None, ["heldout.env=not-an-id"])
    with pytest.raises(ConfigError, match=r"unknown config key 'heldout\.tasks'"):
        load_config(None, ["heldout.tasks=x.jsonl"])


def test_heldout_line_reports_masked_answers_and_a_missing_score():
    result = {"env": "e/E-v0", "questions": 8, "masked": 1, "mean": 0.25, "sampling": "greedy"}
    line = heldout_line({"base": result, "trained": {**result, "masked": 0, "mean": None}})
    assert line == (
        "held-out (8 questions of e/E-v0 never trained on, greedy, 1 answer(s) masked by verifier "
        "errors): base 0.250 -> trained n/a"
    )


# ----- the default run's rows ---------------------------------------------------------------------


def default_envs():
    from cascade_envs.envs.instruction_following.env import InstructionFollowingEnv

    config = load_config(None)
    ((env_id, kwargs),) = config.mix_weights()[1].items()
    heldout = config.heldout_env()
    assert heldout is not None and heldout[0] == env_id == "cascade/InstructionFollowing-v0"
    assert 1e-5 <= config.optim.lr <= 4e-5 and config.rollout.group_size == 8
    return InstructionFollowingEnv(**kwargs, workers=1), InstructionFollowingEnv(**heldout[1], workers=1)


def ideal_answer(task) -> str:
    """A reply that follows the row's instruction (built from its kwargs, not from the checker)."""
    (check,) = task.task.checks
    kwargs = check["kwargs"]
    if check["id"] == "format:options":
        return kwargs["options"].split("/")[0].strip()
    if check["id"] == "startend:end_checker":
        return f"Here is a short answer. {kwargs['end_phrase']}"
    return f"I would say {kwargs['keywords'][0]} is part of it."


def test_default_rows_train_and_heldout_are_disjoint_and_one_instruction_each():
    train, heldout = default_envs()
    try:
        questions = {prompt_messages(t.row)[0]["content"].split("?")[0] for t in train.tasks}
        held = {prompt_messages(t.row)[0]["content"].split("?")[0] for t in heldout.tasks}
        assert len(train.tasks) >= 30 and len(heldout.tasks) == 24
        # two held-out rows (109, 110) ask a train row's question with other options and another answer
        assert questions & held == {"Which of these can fly", "Which of these is a vegetable"}
        prompts = {prompt_messages(t.row)[0]["content"] for t in train.tasks}
        assert not prompts & {prompt_messages(t.row)[0]["content"] for t in heldout.tasks}
        kinds = {t.task.checks[0]["id"] for t in train.tasks}
        assert kinds == {t.task.checks[0]["id"] for t in heldout.tasks}
        assert kinds == {"format:options", "startend:end_checker", "keywords:existence"}
    finally:
        train.close()
        heldout.close()


def test_every_row_accepts_its_instruction_and_no_single_reply_games_the_rows():
    train, heldout = default_envs()
    try:
        tasks = list(train.tasks) + list(heldout.tasks)
        for task in tasks:
            assert train.follow_list(task.task, ideal_answer(task)) == [True], task.task_id
            assert train.follow_list(task.task, "I am not sure.") == [False], task.task_id
        # a policy that collapses to one reply: the best reply taken from any row follows few rows
        best = max(sum(train.follow_list(t.task, ideal_answer(source))[0] for t in tasks) for source in tasks)
        assert best / len(tasks) <= 0.1
    finally:
        train.close()
        heldout.close()
