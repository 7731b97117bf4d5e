"""GenRM aggregation: the pairwise verdicts on one prompt's answers turned into one reward each.

Pure functions, no I/O. The recipe (NeMo Gym ``resources_servers/genrm_compare``, ``utils.py``,
"simple_tiebreaker", the aggregation behind Nemotron 3 Nano's RLHF):

1. Plan: ``all_pairs`` compares every pair ``(i, j), i < j`` (G(G-1)/2 comparisons); ``circular``
   compares each answer with the next, ``(i, (i+1) % G)`` (G comparisons). The answer with the lower
   index is response 1.
2. Tie shift: when the judge gives both responses the same helpfulness score, the ranking (1-6, 3.5
   the midpoint) breaks the tie: response 1 gains ``3.5 - ranking`` and response 2 loses it.
3. Base score: each answer's mean over the comparisons it took part in that gave a verdict.
4. Quality-gated conciseness bonus: the answer with the shortest non-empty reasoning gets
   ``reasoning_bonus``, the one with the shortest non-empty final answer ``answer_bonus``, each only
   when its base score is at least the k-th best of the group, ``k = max(1, int(G * top_fraction))``.
5. Length-normalised adjustment: per length (reasoning, answer), ``w = 1 - (L - min) / (max - min)``
   centred on the group mean (0 when all lengths are equal), times its coefficient, added to the
   score: shorter than the group's average gains, longer loses, and the group's sum is unchanged.

Lengths are characters of the stripped text, as upstream. Where we differ, on purpose:

- answers tied for the shortest length all get the bonus (upstream: the first index only), so a
  reward never depends on the order of the group;
- the group statistics of steps 4-5 run over the answers that have a base score; answers scored
  without the judge (empty, too long, malformed) and masked ones are left out (upstream gives an
  unscored answer a default score of 3 and counts an empty answer as the shortest);
- an answer with no verdict is never given a default score: it is left "unscored" for the env,
  which decides with ``cascade_envs.judges.fault`` whether it scores 0 or is masked.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

SCORE_MIN, SCORE_MAX = 1.0, 5.0
"""Helpfulness scores of the HelpSteer3 scale: 1 (not helpful) to 5 (extremely helpful)."""
RANKING_MIN, RANKING_MAX = 1.0, 6.0
"""Ranking: 1 = response 1 much better, 6 = response 2 much better."""
RANKING_MIDPOINT = 3.5
STRATEGIES = ("all_pairs", "circular")

FailureKind = Literal["reply", "judge", "deadline"]
"""Why a comparison has no verdict: the judge's replies never parsed; the call failed (HTTP,
timeout, after the client's retries); the group deadline passed first."""


@dataclass(frozen=True)
class Verdict:
    """The judge's verdict on one comparison: a score per response and the ranking."""

    score_1: float
    score_2: float
    ranking: float

    def __post_init__(self) -> None:
        for name, value, low, high in (
            ("score_1", self.score_1, SCORE_MIN, SCORE_MAX),
            ("score_2", self.score_2, SCORE_MIN, SCORE_MAX),
            ("ranking", self.ranking, RANKING_MIN, RANKING_MAX),
        ):
            if not low <= value <= high:  # also rejects NaN
                raise ValueError(f"{name} {value:g} is outside {low:g}-{high:g}")

    def tie_broken(self) -> tuple[float, float]:
        """The two scores after the tie shift (step 2)."""
        if self.score_1 != self.score_2:
            return self.score_1, self.score_2
        shift = RANKING_MIDPOINT - self.ranking
        return self.score_1 + shift, self.score_2 - shift


@dataclass(frozen=True)
class Outcome:
    """The result of comparing answer ``first`` (response 1) with ``second`` (response 2)."""

    first: int
    second: int
    verdict: Verdict | None = None
    failure: str | None = None
    kind: FailureKind | None = None


@dataclass(frozen=True)
class Coefficients:
    """The coefficients of steps 4-5; defaults and their source in ``cascade_envs.envs.genrm.env``."""

    reasoning_bonus: float = 0.5
    answer_bonus: float = 0.5
    top_fraction: float = 0.2
    reasoning_length_coeff: float = 0.3
    answer_length_coeff: float = 0.35

    def __post_init__(self) -> None:
        for name in ("reasoning_bonus", "answer_bonus", "reasoning_length_coeff", "answer_length_coeff"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0 < self.top_fraction <= 1:
            raise ValueError(f"top_fraction must be in (0, 1], got {self.top_fraction!r}")


Status = Literal["scored", "unscored", "masked"]


@dataclass
class RolloutScore:
    """One answer's aggregate. ``value`` is set when ``status`` is "scored"; "unscored": none of its
    comparisons gave a verdict (``failed_outcomes`` says why; ``partners_judged``: each partner of
    those comparisons was a stand-in or has a verdict elsewhere, so the failures follow this answer);
    "masked": the plan gave it no comparison (``reason``)."""

    status: Status
    value: float | None = None
    base: float | None = None
    compared: int = 0
    failed: int = 0
    tie_breaks: int = 0
    bonus: float = 0.0
    length_adjustment: float = 0.0
    reason: str | None = None
    failures: list[str] = field(default_factory=list)
    failed_outcomes: list[Outcome] = field(default_factory=list)
    partners_judged: bool = False


def comparison_plan(strategy: str, n: int, judges_per_pair: int = 1) -> list[tuple[int, int]]:
    """The ``(response 1, response 2)`` index pairs to judge for ``n`` answers (each pair repeated
    ``judges_per_pair`` times, as independent judge samples)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {list(STRATEGIES)}")
    if n < 2:
        raise ValueError(f"comparing needs at least 2 answers, got {n}")
    if judges_per_pair < 1:
        raise ValueError(f"judges_per_pair must be at least 1, got {judges_per_pair}")
    if strategy == "all_pairs":
        pairs = list(itertools.combinations(range(n), 2))
    else:
        pairs = [(i, (i + 1) % n) for i in range(n)]
    return [pair for _ in range(judges_per_pair) for pair in pairs]


def length_weights(lengths: Sequence[int]) -> list[float]:
    """Step 5's zero-centred weights: shorter than the group's average is positive."""
    shortest, longest = min(lengths), max(lengths)
    if shortest == longest:
        return [0.0] * len(lengths)
    raw = [1.0 - (length - shortest) / (longest - shortest) for length in lengths]
    mean = sum(raw) / len(raw)
    return [w - mean for w in raw]


def conciseness_bonuses(
    scores: Sequence[float], lengths: Sequence[int], bonus: float, top_fraction: float
) -> list[float]:
    """Step 4 for one length: ``bonus`` to each answer tied for the shortest non-empty length whose
    score is in the group's top fraction; 0 to the others."""
    bonuses = [0.0] * len(scores)
    non_empty = [length for length in lengths if length > 0]
    if bonus <= 0 or not non_empty:
        return bonuses
    k = max(1, int(len(scores) * top_fraction))
    threshold = sorted(scores, reverse=True)[k - 1]
    shortest = min(non_empty)
    for i, (score, length) in enumerate(zip(scores, lengths, strict=True)):
        if length == shortest and score >= threshold:
            bonuses[i] = bonus
    return bonuses


def aggregate_group(
    outcomes: Sequence[Outcome],
    candidates: Sequence[int],
    reasoning_lengths: Mapping[int, int],
    answer_lengths: Mapping[int, int],
    coefficients: Coefficients,
) -> dict[int, RolloutScore]:
    """Each candidate's ``RolloutScore`` from the group's comparison ``outcomes``.

    ``candidates``: the indices of the answers to score (other indices in ``outcomes`` stand for
    answers shown to the judge as an empty response, scored by the caller). An answer with at least
    one verdict is scored on those it has; one with none is "unscored", with what the caller needs
    to weigh whose fault that is (``RolloutScore``).
    """
    verdicts_of: dict[int, list[float]] = {i: [] for i in candidates}
    ties_of = dict.fromkeys(candidates, 0)
    failures_of: dict[int, list[Outcome]] = {i: [] for i in candidates}
    has_verdict: set[int] = set()
    for outcome in outcomes:
        pair = (outcome.first, outcome.second)
        if outcome.verdict is None:
            for i in pair:
                if i in failures_of:
                    failures_of[i].append(outcome)
            continue
        has_verdict.update(pair)
        tied = outcome.verdict.score_1 == outcome.verdict.score_2
        for i, score in zip(pair, outcome.verdict.tie_broken(), strict=True):
            if i in verdicts_of:
                verdicts_of[i].append(score)
                ties_of[i] += tied
    results: dict[int, RolloutScore] = {}
    for i in candidates:
        scores, failed = verdicts_of[i], failures_of[i]
        result = RolloutScore(
            "scored",
            compared=len(scores),
            failed=len(failed),
            tie_breaks=ties_of[i],
            failures=[f"{o.kind}: {o.failure}" for o in failed],
        )
        if scores:
            result.base = sum(scores) / len(scores)
        elif not failed:
            result.status, result.reason = "masked", "the plan gave this answer no comparison"
        else:
            result.status, result.failed_outcomes = "unscored", failed
            partners = [o.second if o.first == i else o.first for o in failed]
            result.partners_judged = all(j not in verdicts_of or j in has_verdict for j in partners)
        results[i] = result
    bases = {i: r.base for i, r in results.items() if r.base is not None}
    _adjust(results, bases, reasoning_lengths, answer_lengths, coefficients)
    return results


def _adjust(
    results: dict[int, RolloutScore],
    bases: dict[int, float],
    reasoning_lengths: Mapping[int, int],
    answer_lengths: Mapping[int, int],
    c: Coefficients,
) -> None:
    """Steps 4-5 over the answers that have a base score; sets each one's ``value``."""
    if not bases:
        return
    indices, scores = list(bases), list(bases.values())
    reasoning = [reasoning_lengths[i] for i in indices]
    answer = [answer_lengths[i] for i in indices]
    bonus = [
        a + b
        for a, b in zip(
            conciseness_bonuses(scores, reasoning, c.reasoning_bonus, c.top_fraction),
            conciseness_bonuses(scores, answer, c.answer_bonus, c.top_fraction),
            strict=True,
        )
    ]
    adjustment = [
        c.reasoning_length_coeff * r + c.answer_length_coeff * a
        for r, a in zip(length_weights(reasoning), length_weights(answer), strict=True)
    ]
    for i, base, b, adj in zip(indices, scores, bonus, adjustment, strict=True):
        results[i].bonus, results[i].length_adjustment = b, adj
        results[i].value = base + b + adj
