"""A real local chat-completions server whose replies a test scripts, one step per request.

``ScriptedChatServer(steps, default=Step(...))``: the n-th ``POST .../chat/completions`` is answered
by ``steps[n]`` (then by ``default``), or, when ``steps`` is a function of the request body, by the
``Step`` it returns: a reply text after ``delay_s``, or an HTTP status, a raw body, or a JSON body of
the test's choosing. It records the requests, their headers, and the most requests it had in flight
at once. ``GET .../models`` lists ``models``. A client that gives up on a slow reply is no error; a
script or handler that raises fails the test when the server's ``with`` block ends.
"""

from __future__ import annotations

import json
import sys
import threading
import time
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
    return {"id": "chatcmpl-scripted", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, **message},
                         "finish_reason": "stop"}]}


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedChatServer
    protocol_version = "HTTP/1.1"  # keep-alive, as a real server

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.server.model_lookups += 1
        if self.path.rstrip("/").endswith("/models"):
            return self._send(200, json.dumps({"object": "list", "data": [{"id": m} for m in self.server.models]}).encode())
        return self._send(404, b'{"error": "no such route"}')

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length))
        step = self.server.begin(request, dict(self.headers))
        try:
            time.sleep(step.delay_s)
            if step.raw is not None:
                return self._send(step.status, step.raw)
            body = step.body if step.body is not None else (
                completion(step.content) if step.status == 200 else {"error": {"message": f"scripted {step.status}"}})
            return self._send(step.status, json.dumps(body).encode())
        finally:
            self.server.end()


class ScriptedChatServer(ThreadingHTTPServer):
    """Answers chat completions as ``steps`` say: a list (then ``default``) or a ``StepScript``."""

    daemon_threads = True
    block_on_close = False  # slow scripted replies may still be sleeping when a test ends

    def __init__(self, steps: Sequence[Step] | StepScript | None = None, *, default: Step = Step(),
                 models: tuple[str, ...] = ("judge",)):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.steps: list[Step] | StepScript = steps if callable(steps) else list(steps or [])
        self.default, self.models = default, list(models)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
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
