"""cascade/MCQA-v0: rows NeMo Gym's mcqa verifier accepts load and score as it scores them.

Upstream (``resources_servers/mcqa/app.py``) catches ``re.error`` per ``output_regex`` pattern and
falls back to the next pattern, then to ``grading_mode``; rows may carry no options when their
regex decides (its captured letter is trusted). Each distinct problem is logged once.
"""

from __future__ import annotations

import logging

import pytest

from cascade_envs import TaskError
from cascade_envs.env import run_sync
from cascade_envs.envs.mcqa import env as mcqa_env
from cascade_envs.envs.mcqa.env import MCQAEnv

OPTIONS = [{"A": "Karyotyping"}, {"B": "Polymerase Chain Reaction (PCR)"}, {"C": "Southern blotting"}]
REGEX = "ANSWER IS\\s*([A-Za-z])"


def row(**extra) -> dict:
    return {
        "prompt": "Which test detects a known point mutation?",
        "options": OPTIONS,
        "expected_answer": "B",
        "grading_mode": "strict_single_letter_boxed",
        **extra,
    }


@pytest.fixture(scope="module")
def env():
    env = MCQAEnv([])
    yield env
    env.close()


def score(env: MCQAEnv, task: dict, text: str):
    return run_sync(env.areward(task, text))


@pytest.fixture
def warnings(caplog):
    mcqa_env._warned.clear()
    with caplog.at_level(logging.WARNING, logger="cascade_envs.mcqa"):
        yield caplog


def test_an_invalid_regex_falls_back_to_the_grading_mode(env, warnings):
    task = row(template_metadata={"output_regex": "(unclosed", "other": 1})
    assert env.load_task(task).output_regex is None  # the pattern is dropped
    assert score(env, task, "\\boxed{B}").value == 1.0
    assert score(env, task, "\\boxed{A}").components["extracted_answer"] == "A"
    assert score(env, task, "(unclosed B").value == 0.0
    env.load_task(task)
    problems = [r.getMessage() for r in warnings.records if "(unclosed" in r.getMessage()]
    assert len(problems) == 1 and "not a valid regex" in problems[0]  # once per distinct pattern


def test_an_invalid_pattern_in_a_list_is_skipped_and_the_others_decide(env, warnings):
    task = row(template_metadata={"output_regex": ["[bad", REGEX, "*also bad"]})
    assert env.load_task(task).output_regex == [REGEX]
    assert score(env, task, "ANSWER IS b").value == 1.0
    assert score(env, task, "ANSWER IS z").components["extracted_answer"] == "Z"  # trusted, as upstream
    assert score(env, task, "no marker \\boxed{B}").value == 1.0  # then the mode
    assert len([r for r in warnings.records if "not a valid regex" in r.getMessage()]) == 2


def test_an_empty_list_of_patterns_leaves_the_grading_mode(env, warnings):
    task = row(template_metadata={"output_regex": []})
    assert score(env, task, "\\boxed{B}").value == 1.0
    assert any("empty list" in r.getMessage() for r in warnings.records)


@pytest.mark.parametrize("options", [None, [], {}, [{"A": None}, {"B": None}], "missing"])
def test_custom_regex_rows_without_options_load_and_trust_the_regex(env, warnings, options):
    task = row(template_metadata={"output_regex": REGEX})
    if options == "missing":
        del task["options"]
    else:
        task["options"] = options
    assert score(env, task, "Thinking.\nANSWER IS B").value == 1.0
    wrong = score(env, task, "ANSWER IS C")
    assert wrong.value == 0.0 and wrong.components["extracted_answer"] == "C"
    missing = score(env, task, "\\boxed{B}")  # no regex match, and no option letter to box: as upstream
    assert missing.value == 0.0 and missing.components["extracted_answer"] is None
    assert any("without options" in r.getMessage() for r in warnings.records)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"options": None}, "options"),  # nothing could score
        ({"options": None, "template_metadata": {"output_regex": ["(bad"]}}, "options"),
        (
            {"options": None, "template_metadata": {"output_regex": REGEX}, "expected_answer": "BC"},
            "expected_answer",
        ),
        (
            {"options": None, "template_metadata": {"output_regex": REGEX}, "expected_answer": None},
            "expected_answer",
        ),
        (
            {"template_metadata": {"output_regex": {"p": REGEX}}},
            "template_metadata.output_regex",
        ),  # upstream crashes
        ({"template_metadata": {"output_regex": None}}, "template_metadata.output_regex"),
        (
            {"options": [{"AB": "x"}], "template_metadata": {"output_regex": REGEX}},
            "options",
        ),  # still well-formed
    ],
)
def test_rows_no_answer_could_win_are_still_refused(env, change, field):
    with pytest.raises(TaskError) as info:
        env.load_task(row(**change))
    assert info.value.field == field


def test_an_empty_capture_names_no_option(env):
    """Upstream matches an empty capture (or ``Answer: \\\\text{}``) to an option whose text is empty,
    so a reply naming nothing scored 1 when that option was the gold one. Deliberate difference."""
    options = [{"A": "Karyotyping"}, {"B": ""}]
    regex_row = row(options=options, template_metadata={"output_regex": "Final:(.*)"})
    for text in ("Final:", "Final:   ", "Final:\n"):
        reward = score(env, regex_row, text)
        assert reward.value == 0.0 and reward.components["extracted_answer"] is None, text
    colon_row = row(options=options, grading_mode="lenient_answer_colon")
    reward = score(env, colon_row, "Answer: \\text{ }")
    assert reward.value == 0.0 and reward.components["extracted_answer"] is None
    assert score(env, colon_row, "Answer: B").value == 1.0
