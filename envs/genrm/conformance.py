"""``cascade/GenRM-v0``'s conformance case (``cascade_envs.testing.check_env``) and its in-process judge.

``ScriptedJudge(rubric_reply)`` judges the bundled "Which is larger, 9.11 or 9.9?" row by a rubric: 5
for the right answer, 1 for the wrong one or none, 3 otherwise; the ranking follows the scores, and a
tie goes to the shorter response. It replies in the layout the request's prompt format asks for.
"""

from __future__ import annotations

import re
from typing import Any

from cascade_envs.data import read_rows
from cascade_envs.testing import Case, ScriptedJudge

ROW = next(row for _, row in read_rows("bundled:genrm/samples.jsonl") if row["id"] == "genrm-0005")
_RESPONSE = re.compile(
    r"\[The Begin of Response ([12])\]\n<<RESPONSE \1 (Q[0-9a-f]+)>>\n(.*?)\n<</RESPONSE \1 \2>>\n"
    r"\[The End of Response \1\]",
    re.DOTALL,
)


def rubric_score(response: str) -> float:
    """5 for the right answer, 1 for the wrong one or none, 3 for anything else."""
    if "9.9 is larger" in response:
        return 5.0
    if "9.11 is larger" in response or response == "None":
        return 1.0
    return 3.0


def responses_of(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """The two responses a judge request compares (either prompt format)."""
    roles = {m["role"]: m["content"] for m in messages}
    if "response_1" in roles:
        return roles["response_1"], roles["response_2"]
    found = {number: text for number, _, text in _RESPONSE.findall(messages[-1]["content"])}
    return found["1"], found["2"]


def rubric_verdict(messages: list[dict[str, Any]]) -> tuple[float, float, float]:
    """Scores by the rubric; the ranking follows them, and a tie goes to the shorter response
    (3.5 when both have the same length)."""
    first, second = responses_of(messages)
    s1, s2 = rubric_score(first), rubric_score(second)
    if s1 != s2:
        return s1, s2, 2.0 if s1 > s2 else 5.0
    if len(first) == len(second):
        return s1, s2, 3.5
    return s1, s2, 3.0 if len(first) < len(second) else 4.0


def sectioned_reply(s1: float, s2: float, ranking: float) -> str:
    return (
        "Both responses were read.</think>\n[The Begin of Analysis on Response 1]\n...\n"
        "[The End of Analysis on Response 1]\n[The Begin of Individual Scores]\n"
        f"\\boxed{{{s1:g}, {s2:g}}}\n[The End of Individual Scores]\n[The Begin of Ranking Score]\n"
        f"\\boxed{{{ranking:g}}}\n[The End of Ranking Score]"
    )


def json_reply(s1: float, s2: float, ranking: float) -> str:
    return f'Compared.</think>{{"score_1": {s1:g}, "score_2": {s2:g}, "ranking": {ranking:g}}}'


def rubric_reply(messages: list[dict[str, Any]]) -> str:
    """The rubric's verdict in the layout the request's prompt format asks for."""
    verdict = rubric_verdict(messages)
    roles = any(m["role"] == "response_1" for m in messages)
    return json_reply(*verdict) if roles else sectioned_reply(*verdict)


CASE = Case(
    good_row=ROW,
    good_answer="<think>Compare tenths: 9 > 1.</think>9.9 is larger.",
    bad_rows=[
        (
            {
                "responses_create_params": {
                    "input": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
                }
            },
            "responses_create_params.input",
        )
    ],
    env_kwargs={"judge_url": ScriptedJudge(rubric_reply)},
)
