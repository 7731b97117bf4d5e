"""A real local chat-completions server whose replies a test scripts, one step per request.

``ScriptedChatServer(steps, default=Step(...))``: the n-th ``POST .../chat/completions`` is answered
by ``steps[n]`` (then by ``default``), or, when ``steps`` is a function of the request body, by the
``Step`` it returns: a reply text after ``delay_s``, or an HTTP status, a raw body, or a JSON body of
the test's choosing. It records the requests, their headers, and the most requests it had in flight
at once. ``GET .../models`` lists ``models``. A client that gives up on a slow reply is no error; a
script or handler that raises fails the test when the server's ``with`` block ends.

``by_model()`` is the script of the ``chat_server`` fixture (tests/conftest.py): the request's
``model`` picks the behaviour:
  echo-answer  -> replies with the text after "ANSWER:" in the last user message (or "none")
  flaky-N      -> fails with 503 on the first N requests of each conversation, then echo-answer
  error-500    -> always 500
  slow         -> answers after 2 s, longer than any test timeout
  garbage      -> a 200 with a body that is not JSON
  no-choices   -> a 200 JSON body without choices
  huge         -> a 4 MB answer
  tool-user    -> first turn: a tool call; after a tool message: a final answer

Paths under ``/http/`` (any method) exercise the generic HTTP client; ``calls[path]`` counts them:
  /http/ok                 -> 200 {"ok": true, "body": <the request's JSON or null>}
  /http/flaky/KEY/N        -> 503 (Retry-After: 0) on the first N calls, then 200 {"ok": true, "attempt": K}
  /http/status/CODE        -> that status with {"error": {"message": "... maximum context length ..."}}
  /http/garbage            -> 200 with a body that is not JSON
  /http/trickle/DELAY/N    -> 200 announcing N bytes of JSON, then one byte every DELAY seconds
  /http/sleep/SECONDS      -> 200 {"ok": true} after SECONDS
  /http/cookie/VALUE       -> 200 {"cookie": <the request's Cookie header or null>}, setting cookie s=VALUE
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Step:
    """One scripted answer: ``content`` as a chat completion, unless ``status``/``raw``/``body`` say otherwise."""

    content: str | None = "ok"
    status: int = 200
    raw: bytes | None = None
    body: Any = None
    delay_s: float = 0.0


StepScript = Callable[[dict[str, Any]], Step]
"""Given a request body, the ``Step`` that answers it."""


def completion(content: Any, **message: Any) -> dict[str, Any]:
    """A chat-completions body whose message has ``content`` (and any other ``message`` fields)."""
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, **message},
                "finish_reason": "stop",
            }
        ],
    }


def by_model() -> StepScript:
    """A script answering as the request's ``model`` says (the module docstring lists the models)."""
    attempts: Counter[str] = Counter()  # per conversation (its first two messages)

    def step(request: dict[str, Any]) -> Step:
        model, messages = request.get("model", ""), request["messages"]
        key = json.dumps(messages[:2], sort_keys=True)
        attempts[key] += 1
        if model.startswith("flaky-") and attempts[key] <= int(model.split("-")[1]):
            return Step(status=503, raw=b'{"error": "overloaded"}')
        if model == "error-500":
            return Step(status=500, raw=b'{"error": "boom"}')
        if model == "garbage":
            return Step(raw=b"<html>not json")
        if model == "no-choices":
            return Step(body={"object": "chat.completion"})
        return Step(body=_model_completion(model, messages), delay_s=2.0 if model == "slow" else 0.0)

    return step


def _model_completion(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if model == "huge":
        content = "x" * (4 * 1024 * 1024)
    elif model == "tool-user" and messages[-1]["role"] != "tool":
        content = '<tool_call>{"name": "lookup", "arguments": {"key": "answer"}}</tool_call>'
    elif model == "tool-user":
        content = f"The answer is {messages[-1]['content']}"
    else:
        content = last_user.split("ANSWER:", 1)[1].strip() if "ANSWER:" in last_user else "none"
    tokens = content.split()[:64] or [""]
    body = completion(content)
    body["choices"][0].update(
        logprobs={"content": [{"token": t, "logprob": -0.5} for t in tokens]},
        token_ids=list(range(len(tokens))),
    )
    return {
        **body,
        "model": model,
        "prompt_token_ids": [1, 2, 3],
        "usage": {"prompt_tokens": 3, "completion_tokens": len(tokens)},
    }


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedChatServer
    protocol_version = "HTTP/1.1"  # keep-alive, as a real server

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.startswith("/http/"):
            return self._http_route()
        self.server.model_lookups += 1
        if self.path.rstrip("/").endswith("/models"):
            return self._send(
                200, json.dumps({"object": "list", "data": [{"id": m} for m in self.server.models]}).encode()
            )
        return self._send(404, b'{"error": "no such route"}')

    def do_POST(self) -> None:
        if self.path.startswith("/http/"):
            return self._http_route()
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length))
        step = self.server.begin(request, dict(self.headers))
        try:
            time.sleep(step.delay_s)
            if step.raw is not None:
                return self._send(step.status, step.raw)
            body = (
                step.body
                if step.body is not None
                else (
                    completion(step.content)
                    if step.status == 200
                    else {"error": {"message": f"scripted {step.status}"}}
                )
            )
            return self._send(step.status, json.dumps(body).encode())
        finally:
            self.server.end()

    def _http_route(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length) if length else b""
        with self.server.lock:
            self.server.calls[self.path] += 1
            attempt = self.server.calls[self.path]
        _, _, kind, *args = self.path.split("/")
        if kind == "ok":
            return self._send(
                200, json.dumps({"ok": True, "body": json.loads(raw) if raw else None}).encode()
            )
        if kind == "flaky" and attempt <= int(args[1]):
            return self._send(503, b'{"error": "overloaded"}', headers={"Retry-After": "0"})
        if kind == "flaky":
            return self._send(200, json.dumps({"ok": True, "attempt": attempt}).encode())
        if kind == "status":
            message = "This model's maximum context length is 4096 tokens; your request has 5000 tokens."
            return self._send(
                int(args[0]), json.dumps({"error": {"message": message, "code": int(args[0])}}).encode()
            )
        if kind == "garbage":
            return self._send(200, b"<html>not json")
        if kind == "trickle":
            delay, size = float(args[0]), int(args[1])
            body = b'{"ok": true}'.rjust(size)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(len(body)):
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                time.sleep(delay)
            return None
        if kind == "sleep":
            time.sleep(float(args[0]))
            return self._send(200, b'{"ok": true}')
        if kind == "cookie":
            body = json.dumps({"cookie": self.headers.get("Cookie")}).encode()
            return self._send(200, body, headers={"Set-Cookie": f"s={args[0]}; Path=/; HttpOnly"})
        return self._send(404, b'{"error": "no such test route"}')


class ScriptedChatServer(ThreadingHTTPServer):
    """Answers chat completions as ``steps`` say: a list (then ``default``) or a ``StepScript``."""

    daemon_threads = True
    block_on_close = False  # slow scripted replies may still be sleeping when a test ends

    def __init__(
        self,
        steps: Sequence[Step] | StepScript | None = None,
        *,
        default: Step = Step(),
        models: tuple[str, ...] = ("judge",),
    ):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.steps: list[Step] | StepScript = steps if callable(steps) else list(steps or [])
        self.default, self.models = default, list(models)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.calls: Counter[str] = Counter()
        self.model_lookups = 0
        self.in_flight = self.max_in_flight = 0
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True)

    def begin(self, request: dict[str, Any], headers: dict[str, str]) -> Step:
        with self.lock:
            index = len(self.requests)
            self.requests.append(request)
            self.headers.append(headers)
            step = self._step_for(request, index)  # under the lock: scripts may count what they saw
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return step

    def _step_for(self, request: dict[str, Any], index: int) -> Step:
        if callable(self.steps):
            return self.steps(request)
        return self.steps[index] if index < len(self.steps) else self.default

    def end(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if error is not None and not isinstance(error, OSError):  # OSError: a client gave up on a slow reply
            with self.lock:
                self.errors.append(error)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> ScriptedChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()
        if self.errors and not any(exc):  # the test's own failure, if any, says more
            raise AssertionError(f"the scripted server failed: {self.errors[0]!r}") from self.errors[0]
