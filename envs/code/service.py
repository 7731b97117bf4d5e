"""The verification service: an async HTTP server with a bounded pool of sandbox workers.

``POST /verify`` ``{"task": row, "answer": text, "config": {...}, "deadline_s": 60}`` scores a
code answer (``cascade/Code-v0`` rules) and returns ``{"reward": {...}}``; ``POST /run``
``{"argv": [...], "files": {...}, "stdin": "...", "timeout_s": 2, "memory_mb": 256}`` runs one
command and returns the ``ExecResult``; ``GET /health`` reports load. At most ``workers`` requests
run at once (one per core by default); up to ``max_queue`` more wait; beyond that the answer is
``429`` at once (back-pressure: the client retries later). A request still queued or running at
its deadline gets ``503``/``504``. Start it with ``cascade-envs serve-sandbox``.

It lives beside the code env it serves: the kernel's sandbox layer imports no env.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import fields
from typing import Any

import h11

from ...core import Reward, TaskError
from ...sandbox import get_sandbox
from ...sandbox.results import SandboxError
from .judge import Judge, JudgeConfig
from .task import parse_code_task

log = logging.getLogger("cascade_envs.envs.code.service")
MAX_BODY = 512 << 20


class HTTPError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class VerifyService:
    """Request handling, independent of the HTTP plumbing (so it can be tested directly)."""

    def __init__(self, workers: int | None = None, backend: str | None = None, max_queue: int | None = None,
                 default_deadline_s: float = 600.0):
        self.workers = workers or os.cpu_count() or 1
        self.max_queue = self.workers * 64 if max_queue is None else max_queue
        self.default_deadline_s = default_deadline_s
        self.sandbox = get_sandbox(backend)
        self.judge = Judge(self.sandbox, JudgeConfig(max_concurrency=self.workers))
        self._slots = asyncio.Semaphore(self.workers)
        self.stats = {"running": 0, "queued": 0, "served": 0, "rejected": 0, "expired": 0, "errors": 0}

    async def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        routes: dict[tuple[str, str], Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            ("POST", "/verify"): self.verify,
            ("POST", "/run"): self.run,
        }
        if (method, path) == ("GET", "/health"):
            return 200, {"status": "ok", "backend": self.sandbox.name, "workers": self.workers,
                         "max_queue": self.max_queue, **self.stats}
        handler = routes.get((method, path))
        if handler is None:
            return 404, {"error": f"no route {method} {path}"}
        try:
            payload = json.loads(body or b"{}")
            if not isinstance(payload, dict):
                raise HTTPError(400, "the request body must be a JSON object")
            return 200, await self._admit(payload, handler)
        except json.JSONDecodeError as exc:
            return 400, {"error": f"invalid JSON: {exc}"}
        except HTTPError as exc:
            return exc.status, {"error": str(exc)}
        except Exception as exc:  # a bug or a sandbox failure: report it, keep serving
            self.stats["errors"] += 1
            log.exception("request failed")
            return 500, {"error": f"{type(exc).__name__}: {exc}"}

    async def _admit(self, payload: dict[str, Any], handler: Callable[[dict[str, Any]], Awaitable[dict]]) -> dict:
        deadline_s = float(payload.get("deadline_s") or self.default_deadline_s)
        deadline = time.monotonic() + deadline_s
        if self.stats["queued"] >= self.max_queue:
            self.stats["rejected"] += 1
            raise HTTPError(429, f"queue full ({self.max_queue} waiting): retry later")
        self.stats["queued"] += 1
        acquire = asyncio.ensure_future(self._slots.acquire())
        try:
            await asyncio.wait_for(asyncio.shield(acquire), deadline_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if acquire.done() and not acquire.cancelled():
                self._slots.release()  # granted just as the deadline passed: hand the slot back
            else:
                acquire.cancel()
            if isinstance(exc, asyncio.CancelledError):
                raise
            self.stats["expired"] += 1
            raise HTTPError(503, f"deadline of {deadline_s:g}s passed while queued") from None
        finally:
            self.stats["queued"] -= 1
        self.stats["running"] += 1
        try:
            return await asyncio.wait_for(handler(payload), max(0.001, deadline - time.monotonic()))
        except TimeoutError:
            self.stats["expired"] += 1
            raise HTTPError(504, f"deadline of {deadline_s:g}s passed while running") from None
        finally:
            self.stats["running"] -= 1
            self.stats["served"] += 1
            self._slots.release()

    async def verify(self, payload: dict[str, Any]) -> dict[str, Any]:
        task, answer = payload.get("task"), payload.get("answer")
        if not isinstance(task, dict) or not isinstance(answer, str):
            raise HTTPError(400, "expected {'task': object, 'answer': string}")
        known = {f.name for f in fields(JudgeConfig)} - {"cpp_flags", "cache_size", "max_concurrency"}
        overrides = {k: v for k, v in (payload.get("config") or {}).items() if k in known}
        try:
            parsed = parse_code_task(task)
            config = JudgeConfig(**{**self.judge.config.__dict__, **overrides})
        except (TaskError, TypeError) as exc:
            return {"reward": Reward.failed(f"malformed task: {exc}").to_dict()}
        reward = await self.judge.ascore(parsed, answer, config)
        return {"reward": reward.to_dict()}

    async def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        argv = payload.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise HTTPError(400, "expected 'argv': a non-empty list of strings")
        try:
            result = await self.sandbox.arun(argv, payload.get("files") or {}, payload.get("stdin") or "",
                                             payload.get("timeout_s"), payload.get("memory_mb"))
        except (ValueError, TypeError, SandboxError) as exc:
            raise HTTPError(400, str(exc)) from exc
        return result.to_dict()


async def _serve_connection(service: VerifyService, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=1 << 20)
    try:
        while True:
            request, body = None, bytearray()
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await reader.read(1 << 16)
                    conn.receive_data(data)
                    if not data and conn.their_state is not h11.DONE:
                        return
                    continue
                if isinstance(event, h11.ConnectionClosed):
                    return
                if isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > MAX_BODY:
                        status, answer = 413, {"error": "request body too large"}
                        break
                elif isinstance(event, h11.EndOfMessage):
                    assert request is not None
                    path = request.target.decode().split("?", 1)[0]
                    status, answer = await service.handle(request.method.decode(), path, bytes(body))
                    break
            data = json.dumps(answer).encode()
            headers = [("content-type", "application/json"), ("content-length", str(len(data)))]
            if status in (429, 503):
                headers.append(("retry-after", "1"))
            writer.write(conn.send(h11.Response(status_code=status, headers=headers))
                         + conn.send(h11.Data(data=data)) + conn.send(h11.EndOfMessage()))
            await writer.drain()
            if conn.our_state is h11.MUST_CLOSE or status == 413:
                return
            conn.start_next_cycle()
    except (h11.RemoteProtocolError, ConnectionError, asyncio.CancelledError):
        return  # a broken client, or the server shutting down
    finally:
        writer.close()


async def start_server(host: str = "127.0.0.1", port: int = 8765, workers: int | None = None,
                       backend: str | None = None, max_queue: int | None = None) -> tuple[asyncio.Server, VerifyService]:
    """Start serving on ``host:port`` (port 0 picks a free one) and return the server and service."""
    service = VerifyService(workers, backend, max_queue)
    server = await asyncio.start_server(lambda r, w: _serve_connection(service, r, w), host, port, limit=1 << 20)
    return server, service


class BackgroundService:
    """The service on its own thread and event loop (for tests, benchmarks and notebooks).

    ``with BackgroundService(workers=2) as svc: CodeEnv(verifier_url=svc.url)``; port 0 picks a free port.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **options: Any):
        import threading

        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                self.server, self.service = self.loop.run_until_complete(start_server(host, port, **options))
            except BaseException as exc:
                failure.append(exc)
                return
            finally:
                started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=main, name="cascade-sandbox-service", daemon=True)
        self.thread.start()
        started.wait()
        if failure:
            raise failure[0]
        self.url = f"http://{host}:{self.server.sockets[0].getsockname()[1]}"

    def close(self) -> None:
        """Stop serving: close the listener, cancel requests in flight, stop the loop."""

        async def shutdown() -> None:
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(30)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)

    def __enter__(self) -> BackgroundService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_sandbox(host: str = "127.0.0.1", port: int = 8765, workers: int | None = None,
                  backend: str | None = None, max_queue: int | None = None) -> None:
    """Run the verification service until interrupted (the ``cascade-envs serve-sandbox`` command)."""

    async def main() -> None:
        server, service = await start_server(host, port, workers, backend, max_queue)
        bound = server.sockets[0].getsockname()
        print(f"cascade-envs sandbox service on http://{bound[0]}:{bound[1]} "
              f"(backend {service.sandbox.name}, {service.workers} workers, queue {service.max_queue})", flush=True)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    """``python -m cascade_envs.envs.code.service [OPTIONS]``: the same as ``cascade-envs serve-sandbox``."""
    import sys

    from ...cli import main as cli_main

    return cli_main(["serve-sandbox", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
