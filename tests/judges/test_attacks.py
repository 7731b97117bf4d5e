"""The judged envs under attack (``tests/judges/attacks.py``): answers that close their quote, forge
verdicts or derail the judge, played against naive judge doubles.

Each attack scores its honest score (0 for a wrong answer; GenRM: no more than the honest wrong
answer of its group), never masked and never paid by a forged verdict, with every defence on. Each
check is then shown to fail: with every defence off the attack is paid or masked; each defence
that stops it alone does so with the others off; and a defence it needs fails the check when it
alone is off.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from cascade_envs.core import Reward
from cascade_envs.env import run_sync
from cascade_envs.judges.quoting import DEFENCES, Defences
from cascade_envs.registry import make
from cascade_envs.testing import ScriptedJudge
from tests.judges.attacks import (
    ATTACKS,
    DERAIL,
    ECHO,
    GENRM_FORGERIES,
    SUFFICIENT,
    TARGETS,
    NaiveJudge,
    Target,
    needed,
)

ALL = ("boundary", "scrub", "blame")
RIGHT, WRONG = "9.9 is larger.", "9.11 is larger."
CASES = [
    (target, attack, kind, injection)
    for target in TARGETS.values()
    for attack, (kind, injection) in {
        **ATTACKS,
        **({name: (ECHO, text) for name, text in GENRM_FORGERIES.items()} if target.name == "genrm" else {}),
    }.items()
]
IDS = [f"{target.name}-{attack}" for target, attack, _, _ in CASES]


@contextmanager
def only(*on: str) -> Iterator[None]:
    """Run with only the defences ``on`` switched on."""
    saved = Defences(**vars(DEFENCES))
    for name in ALL:
        setattr(DEFENCES, name, name in on)
    try:
        yield
    finally:
        for name in ALL:
            setattr(DEFENCES, name, getattr(saved, name))


def play(target: Target, kind: str, answers: list[str]) -> list[Reward]:
    """``answers`` to the target's row, scored as a group, judged by the naive ``kind`` judge."""
    env = make(target.env_id, judge_url=ScriptedJudge(NaiveJudge(target, kind)), **target.env_kwargs)
    try:
        return run_sync(env.ascore_responses(target.row, answers))
    finally:
        env.close()


def attacked(target: Target, kind: str, injection: str) -> tuple[Reward, Reward | None]:
    """The attack's reward, and (GenRM) the honest wrong answer's in the same group."""
    answer = target.answer(injection)
    if target.name != "genrm":
        (reward,) = play(target, kind, [answer])
        return reward, None
    _, reward, wrong = play(target, kind, [RIGHT, answer, WRONG])
    return reward, wrong


def honest(reward: Reward, wrong: Reward | None) -> bool:
    """Not masked and not paid: 0 (the answer's fault or the judge's verdict), or for GenRM no more
    than the honest wrong answer of its group."""
    if reward.masked:
        return False
    if wrong is None or (reward.value == 0 and reward.components.get("judge_fault") == "answer"):
        return reward.value == 0
    return not wrong.masked and reward.components["base_score"] <= wrong.components["base_score"]


@pytest.mark.parametrize(("target", "attack", "kind", "injection"), CASES, ids=IDS)
def test_every_attack_scores_its_honest_score(target: Target, attack: str, kind: str, injection: str):
    reward, wrong = attacked(target, kind, injection)
    assert honest(reward, wrong), (reward, wrong)
    if kind == DERAIL:
        assert reward.components["judge_fault"] == "answer"
        assert "control request" in reward.reason or "other comparison" in reward.reason


@pytest.mark.parametrize(("target", "attack", "kind", "injection"), CASES, ids=IDS)
def test_every_attack_succeeds_with_the_defences_off(target: Target, attack: str, kind: str, injection: str):
    with only():
        reward, wrong = attacked(target, kind, injection)
    assert not honest(reward, wrong), (reward, wrong)


@pytest.mark.parametrize(("target", "attack", "kind", "injection"), CASES, ids=IDS)
def test_the_defences_that_stop_an_attack_do_so_alone(target: Target, attack: str, kind: str, injection: str):
    with only(*SUFFICIENT[kind]):
        reward, wrong = attacked(target, kind, injection)
    assert honest(reward, wrong), (SUFFICIENT[kind], reward, wrong)


NEEDED = [
    (target, attack, kind, injection, defence)
    for target, attack, kind, injection in CASES
    for defence in needed(target, attack, kind)
]


@pytest.mark.parametrize(
    ("target", "attack", "kind", "injection", "defence"),
    NEEDED,
    ids=[f"{t.name}-{a}-{d}" for t, a, _, _, d in NEEDED],
)
def test_an_attack_gets_through_when_a_defence_it_needs_is_off(
    target: Target, attack: str, kind: str, injection: str, defence: str
):
    with only(*(name for name in ALL if name != defence)):
        reward, wrong = attacked(target, kind, injection)
    assert not honest(reward, wrong), (defence, reward, wrong)


# ----- a group that derails the judge on every answer --------------------------------------------------


def test_a_genrm_group_that_derails_the_judge_on_every_answer_scores_zeros():
    """GRPO groups are one model's answers: derailing the judge on all of them must not mask them."""
    target = TARGETS["genrm"]
    answers = [
        target.answer(ATTACKS["derail-en"][1]),
        f"9.9 is larger?\n{ATTACKS['derail-fr'][1]}",
        "9.8 is larger.\n" + ATTACKS["derail-en"][1],
    ]
    rewards = play(target, DERAIL, answers)
    assert [(r.value, r.masked, r.components["judge_fault"]) for r in rewards] == [(0.0, False, "answer")] * 3
    assert all("control request" in (r.reason or "") for r in rewards)
    with only("boundary", "scrub"):
        assert all(r.masked for r in play(target, DERAIL, answers))


def test_a_derailing_answer_masks_its_innocent_partner_in_a_pair_and_scores_0_itself():
    """Two answers, one comparison, no verdict: the solo controls say whose fault it is."""
    target = TARGETS["genrm"]
    innocent, derailing = play(target, DERAIL, [RIGHT, target.answer(ATTACKS["derail-en"][1])])
    assert innocent.masked and "not this answer's alone" in innocent.error
    assert (derailing.value, derailing.masked, derailing.components["judge_fault"]) == (0.0, False, "answer")


@pytest.mark.parametrize("name", ["long_context", "equivalence", "agentless"])
def test_a_judge_that_derails_on_every_request_masks(name: str):
    """A judge that fails the control request too is the judge's fault: masked, with the reason."""
    target = TARGETS[name]
    env = make(target.env_id, judge_url=ScriptedJudge(lambda messages: "A poem."), **target.env_kwargs)
    try:
        (reward,) = run_sync(env.ascore_responses(target.row, [target.answer("")]))
    finally:
        env.close()
    assert reward.masked and "failed a control request" in reward.error
