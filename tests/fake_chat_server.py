"""A real HTTP server speaking the OpenAI chat-completions API, for tests.

The ``model`` field of a request picks the behaviour:
  echo-answer  -> replies with the text after "ANSWER:" in the last user message (or "none")
  flaky-N      -> fails with 503 on the first N requests of each conversation, then echo-answer
  error-500    -> always 500
  slow         -> sleeps longer than any test timeout
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
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    server: FakeChatServer

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.startswith("/http/"):
            return self._http_route()
        if self.path.endswith("/models"):
            self._send(200, json.dumps({"object": "list", "data": [{"id": "echo-answer"}]}).encode())
        else:
            self._send(404, b"{}")

    def _http_route(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length) if length else b""
        with self.server.lock:
            self.server.calls[self.path] += 1
            attempt = self.server.calls[self.path]
        _, _, kind, *args = self.path.split("/")
        if kind == "ok":
            return self._send(200, json.dumps({"ok": True, "body": json.loads(raw) if raw else None}).encode())
        if kind == "flaky" and attempt <= int(args[1]):
            return self._send(503, b'{"error": "overloaded"}', headers={"Retry-After": "0"})
        if kind == "flaky":
            return self._send(200, json.dumps({"ok": True, "attempt": attempt}).encode())
        if kind == "status":
            message = "This model's maximum context length is 4096 tokens; your request has 5000 tokens."
            return self._send(int(args[0]), json.dumps({"error": {"message": message, "code": int(args[0])}}).encode())
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
        return self._send(404, b'{"error": "no such test route"}')

    def do_POST(self) -> None:
        if self.path.startswith("/http/"):
            return self._http_route()
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length))
        self.server.requests.append(request)
        model = request.get("model", "")
        messages = request["messages"]
        key = json.dumps(messages[:2], sort_keys=True)
        with self.server.lock:
            self.server.calls[key] += 1
            attempt = self.server.calls[key]
        if model.startswith("flaky-") and attempt <= int(model.split("-")[1]):
            return self._send(503, b'{"error": "overloaded"}')
        if model == "error-500":
            return self._send(500, b'{"error": "boom"}')
        if model == "slow":
            time.sleep(2)
        if model == "garbage":
            return self._send(200, b"<html>not json")
        if model == "no-choices":
            return self._send(200, b'{"object": "chat.completion"}')
        self._send(200, json.dumps(_completion(model, messages, request)).encode())


def _completion(model: str, messages: list[dict], request: dict) -> dict:
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
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": {"content": [{"token": t, "logprob": -0.5} for t in tokens]},
                "token_ids": list(range(len(tokens))),
            }
        ],
        "prompt_token_ids": [1, 2, 3],
        "usage": {"prompt_tokens": 3, "completion_tokens": len(tokens)},
    }


class FakeChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict] = []
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that time out on purpose close their socket early

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> FakeChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()
