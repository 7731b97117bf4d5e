"""``cascade/LongContextQA-v0``'s conformance case (``cascade_envs.testing.check_env``) and its in-process judge."""

from __future__ import annotations

import re
from typing import Any

from cascade_envs.data import read_rows
from cascade_envs.testing import Case, ScriptedJudge

ROW = next(row for _, row in read_rows("bundled:long_context/samples.jsonl"))


def matching_verdict(messages: list[dict[str, Any]]) -> str:
    """CORRECT when the fenced candidate names the fenced official (or gold) answer's first words."""
    text = messages[0]["content"]
    found = re.findall(r"<<([A-Z ()a-z]+) (Q[0-9a-f]+)>>\n(.*?)\n<</\1 \2>>", text, flags=re.DOTALL)
    sections = {title: body for title, _, body in found}
    official = sections["OFFICIAL ANSWER"] if "OFFICIAL ANSWER" in sections else sections["GOLD ANSWER"]
    key = " ".join(official.split()[:3]).lower()
    return "CORRECT" if key in sections["CANDIDATE ANSWER"].lower() else "INCORRECT"


CASE = Case(
    good_row=ROW,
    good_answer="<think>The March minutes name the station.</think>Alder Creek Pump Station, 31 hours",
    bad_answer="Harbourview Treatment Plant, 12 hours",
    bad_rows=[({**ROW, "answer": None}, "expected_answer"), ({**ROW, "input_tokens": 10**6}, "input_tokens")],
    env_kwargs={"judge_url": ScriptedJudge(matching_verdict)},
    other_kwargs={"max_input_tokens": None},
)
