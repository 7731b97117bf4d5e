"""An in-process judge for long-context tests and the conformance check: ``ScriptedJudge(matching_verdict)``."""

from __future__ import annotations

import re
from typing import Any


def matching_verdict(messages: list[dict[str, Any]]) -> str:
    """CORRECT when the fenced candidate names the fenced official answer's first words."""
    text = messages[0]["content"]
    found = re.findall(r"<<([A-Z ()a-z]+) (Q[0-9a-f]+)>>\n(.*?)\n<</\1 \2>>", text, flags=re.DOTALL)
    sections = {title: body for title, _, body in found}
    key = " ".join(sections["OFFICIAL ANSWER"].split()[:3]).lower()
    return "CORRECT" if key in sections["CANDIDATE ANSWER"].lower() else "INCORRECT"
