"""Scripted GenRM judges for the tests: a rubric judge for "Which is larger, 9.11 or 9.9?".

``RubricJudge`` answers in-process (a ``Judge`` object); ``ScriptedJudgeServer`` is a real local HTTP
server speaking the chat-completions API whose replies a test scripts per request (the rubric by
default; 5xx, latency, garbage bodies or unparseable replies where the test says so).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

QUESTION = "Which is larger, 9.11 or 9.9? Answer briefly."
ROW = {"id": "larger", "responses_create_params": {"input": [{"role": "user", "content": QUESTION}]}}
RIGHT = "<think>Compare tenths: 9 > 1.</think>9.9 is larger."
RIGHT_LONG = ("<think>Write 9.9 as 9.90 and compare it with 9.11 digit by digit.</think>"
              "9.9 is larger: as 9.90 against 9.11, the tenths digit decides, and 9 > 1.")
WRONG = "<think>11 > 9.</think>9.11 is larger."

_RESPONSE = re.compile(r"\[The Begin of Response ([12])\]\n(.*?)\n\[The End of Response \1\]", re.DOTALL)


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
    found = dict(_RESPONSE.findall(messages[-1]["content"]))
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
    return ("Both responses were read.</think>\n[The Begin of Analysis on Response 1]\n...\n"
            "[The End of Analysis on Response 1]\n[The Begin of Individual Scores]\n"
            f"\\boxed{{{s1:g}, {s2:g}}}\n[The End of Individual Scores]\n[The Begin of Ranking Score]\n"
            f"\\boxed{{{ranking:g}}}\n[The End of Ranking Score]")


def json_reply(s1: float, s2: float, ranking: float) -> str:
    return f'Compared.</think>{{"score_1": {s1:g}, "score_2": {s2:g}, "ranking": {ranking:g}}}'


def rubric_reply(messages: list[dict[str, Any]]) -> str:
    """The rubric's verdict in the layout the request's prompt format asks for."""
    verdict = rubric_verdict(messages)
    roles = any(m["role"] == "response_1" for m in messages)
    return json_reply(*verdict) if roles else sectioned_reply(*verdict)


class RubricJudge:
    """An in-process ``Judge`` giving the rubric's verdicts; ``calls`` records each request."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def acomplete(self, messages: list[dict[str, Any]], *, max_tokens: int | None = None,
                        temperature: float = 0.0, top_p: float = 1.0) -> str:
        self.calls.append({"messages": messages, "max_tokens": max_tokens, "temperature": temperature,
                           "top_p": top_p})
        return rubric_reply(messages)

    async def aclose(self) -> None:
        pass


Script = Callable[[dict[str, Any]], "str | tuple[int, bytes] | float"]
"""Given a request body: the reply text; or ``(status, raw body)``; or a delay in seconds, then the
rubric's reply."""


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedJudgeServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        with self.server.lock:
            self.server.requests.append(request)
        action = self.server.script(request)
        if isinstance(action, float):
            time.sleep(action)
            action = rubric_reply(request["messages"])
        if isinstance(action, tuple):
            status, body = action
        else:
            status = 200
            body = json.dumps({"id": "x", "object": "chat.completion", "model": request["model"], "choices": [
                {"index": 0, "message": {"role": "assistant", "content": action}, "finish_reason": "stop"}]}).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up on a slow reply


class ScriptedJudgeServer(ThreadingHTTPServer):
    """A chat-completions server answering each request as ``script`` says (default: the rubric)."""

    daemon_threads = True
    block_on_close = False  # slow scripted replies may still be sleeping when a test ends

    def __init__(self, script: Script | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: Script = script or (lambda request: rubric_reply(request["messages"]))
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> ScriptedJudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()
