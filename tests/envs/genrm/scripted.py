"""A scripted GenRM judge for the tests: the rubric for "Which is larger, 9.11 or 9.9?".

``rubric_reply`` (the env's conformance judge, ``cascade_envs.envs.genrm.conformance``) answers
in-process as ``ScriptedJudge(rubric_reply)``; ``rubric_step`` is the rubric's answer as a ``Step`` of
``tests.chat_server.ScriptedChatServer`` (a real local HTTP server), which a test's script replaces
with 5xx, latency, garbage bodies or unparseable replies where it says so.
"""

from __future__ import annotations

from typing import Any

from cascade_envs.envs.genrm.conformance import responses_of, rubric_reply
from tests.chat_server import Step

__all__ = ["QUESTION", "RIGHT", "RIGHT_LONG", "ROW", "WRONG", "responses_of", "rubric_reply", "rubric_step"]

QUESTION = "Which is larger, 9.11 or 9.9? Answer briefly."
ROW = {"id": "larger", "responses_create_params": {"input": [{"role": "user", "content": QUESTION}]}}
RIGHT = "<think>Compare tenths: 9 > 1.</think>9.9 is larger."
RIGHT_LONG = (
    "<think>Write 9.9 as 9.90 and compare it with 9.11 digit by digit.</think>"
    "9.9 is larger: as 9.90 against 9.11, the tenths digit decides, and 9 > 1."
)
WRONG = "<think>11 > 9.</think>9.11 is larger."


def rubric_step(request: dict[str, Any], delay_s: float = 0.0) -> Step:
    """The rubric's reply to a chat-completions request body, after ``delay_s``."""
    return Step(rubric_reply(request["messages"]), delay_s=delay_s)
