"""An in-process judge for long-context tests and the conformance check."""

from __future__ import annotations

import re
from typing import Any


class MatchingJudge:
    """An in-process judge: CORRECT when the fenced candidate names the fenced official answer's first words."""

    async def acomplete(self, messages: list[dict[str, Any]], *, max_tokens: int | None = None,
                        temperature: float = 0.0, top_p: float = 1.0) -> str:
        text = messages[0]["content"]
        found = re.findall(r"<<([A-Z ()a-z]+) (Q[0-9a-f]+)>>\n(.*?)\n<</\1 \2>>", text, flags=re.DOTALL)
        sections = {title: body for title, _, body in found}
        key = " ".join(sections["OFFICIAL ANSWER"].split()[:3]).lower()
        return "CORRECT" if key in sections["CANDIDATE ANSWER"].lower() else "INCORRECT"

    async def aclose(self) -> None:
        pass
