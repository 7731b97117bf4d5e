"""GenRM aggregation: comparison plans, tie shift, means, conciseness bonus, length adjustment, masking."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascade_envs.envs.genrm import (
    Coefficients,
    Outcome,
    Verdict,
    aggregate_group,
    comparison_plan,
    conciseness_bonuses,
    length_weights,
)

NONE = Coefficients(0.0, 0.0, 0.2, 0.0, 0.0)


def ok(i: int, j: int, s1: float, s2: float, ranking: float) -> Outcome:
    return Outcome(i, j, verdict=Verdict(s1, s2, ranking))


def fail(i: int, j: int, kind: str = "reply") -> Outcome:
    return Outcome(i, j, failure=f"{kind} failure on ({i}, {j})", kind=kind)  # type: ignore[arg-type]


def aggregate(outcomes, n, coefficients=NONE, reasoning=None, answers=None, candidates=None):
    candidates = list(range(n)) if candidates is None else candidates
    reasoning = reasoning or [0] * n
    answers = answers or [10] * n
    return aggregate_group(
        outcomes, candidates, dict(enumerate(reasoning)), dict(enumerate(answers)), coefficients
    )


# ----- plans ------------------------------------------------------------------------------------


def test_all_pairs_compares_every_pair_once_with_the_lower_index_first():
    assert comparison_plan("all_pairs", 4) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert len(comparison_plan("all_pairs", 16)) == 16 * 15 // 2


def test_circular_compares_each_answer_with_the_next():
    assert comparison_plan("circular", 4) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert comparison_plan("circular", 2) == [(0, 1), (1, 0)]  # both orders, as upstream
    assert len(comparison_plan("circular", 16)) == 16


def test_judges_per_pair_repeats_the_plan():
    assert comparison_plan("all_pairs", 3, judges_per_pair=2) == [(0, 1), (0, 2), (1, 2)] * 2


@pytest.mark.parametrize(
    ("strategy", "n", "judges"),
    [("tournament", 4, 1), ("all_pairs", 1, 1), ("circular", 0, 1), ("all_pairs", 4, 0)],
)
def test_bad_plans_are_refused(strategy, n, judges):
    with pytest.raises(ValueError):
        comparison_plan(strategy, n, judges)


# ----- verdicts and the tie shift ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("s1", "s2", "ranking"), [(0, 3, 2), (3, 6, 2), (3, 3, 0), (3, 3, 7), (math.nan, 3, 2), (3, 3, math.nan)]
)
def test_verdicts_out_of_the_scales_are_refused(s1, s2, ranking):
    with pytest.raises(ValueError, match="outside"):
        Verdict(s1, s2, ranking)


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        (Verdict(3, 3, 1), (5.5, 0.5)),  # tie, response 1 much better: +2.5 / -2.5
        (Verdict(3, 3, 2), (4.5, 1.5)),
        (Verdict(3, 3, 4), (2.5, 3.5)),  # tie, response 2 slightly better
        (Verdict(3, 3, 6), (0.5, 5.5)),
        (Verdict(4, 4, 3.5), (4.0, 4.0)),  # the midpoint shifts nothing
        (Verdict(4, 3, 6), (4.0, 3.0)),  # no tie: the ranking is not used
    ],
)
def test_a_score_tie_is_shifted_by_the_ranking(verdict, expected):
    assert verdict.tie_broken() == expected


def test_the_base_score_is_the_mean_over_an_answers_comparisons():
    outcomes = [ok(0, 1, 5, 3, 2), ok(0, 2, 4, 4, 3), ok(1, 2, 2, 4, 5)]
    scores = aggregate(outcomes, 3)
    assert scores[0].base == pytest.approx((5 + 4.5) / 2)
    assert scores[1].base == pytest.approx((3 + 2) / 2)
    assert scores[2].base == pytest.approx((3.5 + 4) / 2)
    assert [scores[i].value for i in range(3)] == [scores[i].base for i in range(3)]  # no coefficients
    assert (scores[0].tie_breaks, scores[1].tie_breaks, scores[2].tie_breaks) == (1, 0, 1)
    assert all(s.status == "scored" and s.compared == 2 and s.failed == 0 for s in scores.values())


# ----- length adjustment and conciseness bonus --------------------------------------------------


def test_length_weights_are_zero_centred_and_favour_shorter():
    assert length_weights([10, 20, 30]) == pytest.approx([0.5, 0.0, -0.5])
    assert length_weights([5, 5, 5]) == [0.0, 0.0, 0.0]
    weights = length_weights([0, 100, 400, 50])
    assert sum(weights) == pytest.approx(0.0, abs=1e-12)
    assert weights[0] == max(weights) and weights[2] == min(weights)


def test_the_conciseness_bonus_needs_a_top_score():
    scores = [5.0, 4.0, 3.0, 2.0, 1.0]
    # k = int(5 * 0.2) = 1: only the best score qualifies
    assert conciseness_bonuses(scores, [50, 40, 30, 20, 10], 0.5, 0.2) == [0, 0, 0, 0, 0]
    assert conciseness_bonuses(scores, [10, 40, 30, 20, 50], 0.5, 0.2) == [0.5, 0, 0, 0, 0]
    # k = int(5 * 0.4) = 2: the second best qualifies too
    assert conciseness_bonuses(scores, [40, 10, 30, 20, 50], 0.5, 0.4) == [0, 0.5, 0, 0, 0]


def test_the_conciseness_bonus_skips_empty_lengths_and_rewards_every_tie():
    assert conciseness_bonuses([5.0, 5.0, 1.0], [0, 30, 40], 0.5, 0.2) == [0, 0.5, 0]  # 0 is "no reasoning"
    assert conciseness_bonuses([5.0, 5.0, 1.0], [20, 20, 40], 0.5, 0.2) == [0.5, 0.5, 0]
    assert conciseness_bonuses([5.0, 4.0], [0, 0], 0.5, 0.2) == [0, 0]
    assert conciseness_bonuses([5.0, 4.0], [10, 20], 0.0, 0.2) == [0, 0]


def test_a_group_of_16_uses_the_third_best_score_as_the_gate():
    scores = [float(16 - i) for i in range(16)]  # 16, 15, ..., 1: k = int(16 * 0.2) = 3, gate 14
    lengths = [100] * 16
    lengths[2] = 5  # third best is the shortest
    assert conciseness_bonuses(scores, lengths, 0.5, 0.2)[2] == 0.5
    lengths[2], lengths[3] = 100, 5  # fourth best is the shortest: out of the top fraction
    assert conciseness_bonuses(scores, lengths, 0.5, 0.2) == [0.0] * 16


def test_the_final_reward_adds_bonus_and_length_adjustment_to_the_base():
    outcomes = [ok(0, 1, 5, 3, 2), ok(0, 2, 5, 1, 1), ok(1, 2, 4, 2, 2)]
    c = Coefficients(
        reasoning_bonus=0.5,
        answer_bonus=0.25,
        top_fraction=0.2,
        reasoning_length_coeff=0.3,
        answer_length_coeff=0.35,
    )
    scores = aggregate(outcomes, 3, c, reasoning=[100, 50, 0], answers=[20, 40, 60])
    bases = [5.0, 3.5, 1.5]
    # reasoning: shortest non-empty is answer 1 (50), not the best (5.0): no bonus; answer: answer 0 is
    # shortest and best: +0.25. Weights: reasoning [0, .5, 1] - .5, answer [1, .5, 0] - .5.
    expected = [
        bases[0] + 0.25 + 0.3 * -0.5 + 0.35 * 0.5,
        bases[1] + 0.0 + 0.0 + 0.0,
        bases[2] + 0.3 * 0.5 - 0.35 * 0.5,
    ]
    assert [scores[i].value for i in range(3)] == pytest.approx(expected)
    assert scores[0].bonus == 0.25 and scores[1].bonus == 0.0
    assert sum(s.length_adjustment for s in scores.values()) == pytest.approx(0.0, abs=1e-12)


def test_coefficients_are_validated():
    for bad in (
        {"reasoning_bonus": -1},
        {"answer_length_coeff": math.nan},
        {"top_fraction": 0},
        {"top_fraction": 1.5},
    ):
        with pytest.raises(ValueError):
            Coefficients(**bad)


# ----- failed comparisons: what the env is left to weigh --------------------------------------------------------


def test_an_answer_is_scored_on_the_comparisons_that_gave_a_verdict():
    outcomes = [ok(0, 1, 5, 1, 1), fail(0, 2, "judge"), ok(1, 2, 2, 4, 5), fail(0, 1, "deadline")]
    scores = aggregate(outcomes, 3)
    assert scores[0].base == 5.0 and scores[0].compared == 1 and scores[0].failed == 2
    assert scores[0].failures[0].startswith("judge: ")
    assert scores[2].base == 4.0 and scores[2].status == "scored"


def test_an_answer_whose_partners_were_judged_elsewhere_carries_its_failures():
    # answer 2's every comparison came back unparseable while the judge judged 0-1, 0-3, 1-3
    outcomes = [ok(0, 1, 4, 3, 2), fail(0, 2), ok(0, 3, 4, 2, 2), fail(1, 2), ok(1, 3, 3, 2, 2), fail(2, 3)]
    scores = aggregate(outcomes, 4)
    assert scores[2].status == "unscored" and scores[2].value is None and scores[2].partners_judged
    assert [(o.first, o.second) for o in scores[2].failed_outcomes] == [(0, 2), (1, 2), (2, 3)]
    assert all(scores[i].status == "scored" and scores[i].failed == 1 for i in (0, 1, 3))


@pytest.mark.parametrize("kind", ["judge", "deadline"])
def test_failures_of_every_kind_are_left_to_the_env(kind):
    outcomes = [ok(0, 1, 4, 3, 2), fail(0, 2, kind), fail(1, 2, kind)]
    scores = aggregate(outcomes, 3)
    assert scores[2].status == "unscored" and [o.kind for o in scores[2].failed_outcomes] == [kind] * 2


def test_partners_without_a_verdict_leave_the_fault_open():
    scores = aggregate([fail(0, 1), fail(0, 2), fail(1, 2)], 3)
    assert all(s.status == "unscored" and not s.partners_judged for s in scores.values())
    # circular 0-1, 1-2, 2-3, 3-4, 4-0 with 0 and 2 breaking the judge: 1 met only breakers
    circular = [fail(0, 1), fail(1, 2), fail(2, 3), ok(3, 4, 4, 4, 3.5), fail(4, 0)]
    scores = aggregate(circular, 5)
    assert not scores[1].partners_judged and not scores[0].partners_judged
    assert scores[3].status == scores[4].status == "scored"
    # a stand-in partner (index 1, an empty answer shown as "None") counts as judged
    scores = aggregate([fail(0, 1)], 2, candidates=[0])
    assert scores[0].status == "unscored" and scores[0].partners_judged


def test_an_answer_the_plan_never_compared_is_masked():
    scores = aggregate([ok(0, 1, 4, 3, 2)], 3)
    assert scores[2].status == "masked" and scores[2].reason == "the plan gave this answer no comparison"


def test_placeholders_are_compared_but_not_scored():
    # index 1 stands for an empty answer shown as "None": answer 0 is scored against it
    scores = aggregate([ok(0, 1, 5, 1, 1)], 2, candidates=[0])
    assert list(scores) == [0] and scores[0].base == 5.0


# ----- properties --------------------------------------------------------------------------------

verdicts = st.builds(
    Verdict, st.integers(1, 5).map(float), st.integers(1, 5).map(float), st.integers(1, 6).map(float)
)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 7), data=st.data())
def test_rewards_do_not_depend_on_the_order_of_the_group(n, data):
    plan = comparison_plan("all_pairs", n)
    outcome_list = [Outcome(i, j, verdict=data.draw(verdicts)) for i, j in plan]
    reasoning = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    answers = data.draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    order = data.draw(st.permutations(range(n)))  # new position of old answer k is order[k]
    c = Coefficients()
    before = aggregate(outcome_list, n, c, reasoning, answers)
    moved = [Outcome(order[o.first], order[o.second], verdict=o.verdict) for o in outcome_list]
    new_reasoning, new_answers = [0] * n, [0] * n
    for k in range(n):
        new_reasoning[order[k]], new_answers[order[k]] = reasoning[k], answers[k]
    after = aggregate(moved, n, c, new_reasoning, new_answers)
    for k in range(n):
        assert after[order[k]].value == pytest.approx(before[k].value)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 8), data=st.data())
def test_an_answer_that_wins_every_comparison_gets_the_top_base_score(n, data):
    plan = comparison_plan("all_pairs", n)
    outcomes = []
    for i, j in plan:
        verdict = data.draw(verdicts)
        if 0 in (i, j):  # answer 0 wins outright: 5 against at most 4
            low = data.draw(st.integers(1, 4).map(float))
            verdict = Verdict(5, low, 1) if i == 0 else Verdict(low, 5, 6)
        outcomes.append(Outcome(i, j, verdict=verdict))
    scores = aggregate(outcomes, n)
    assert scores[0].base == 5.0
    assert all((scores[k].base or 0) <= 5.0 + 2.5 for k in range(n))


def test_a_group_of_16_aggregates_in_well_under_a_millisecond():
    n = 16
    outcomes = [
        ok(i, j, 1 + (i * 7 + j) % 5, 1 + (j * 3 + i) % 5, 1 + (i + j) % 6)
        for i, j in comparison_plan("all_pairs", n)
    ]
    reasoning, answers = [100 + 37 * i for i in range(n)], [50 + 11 * (n - i) for i in range(n)]
    runs = 200
    start = time.perf_counter()
    for _ in range(runs):
        aggregate(outcomes, n, Coefficients(), reasoning, answers)
    per_group = (time.perf_counter() - start) / runs
    assert per_group < 5e-3, f"{per_group * 1e3:.2f} ms per group of 16"
