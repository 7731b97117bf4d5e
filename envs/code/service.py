"""The verification service: an async HTTP server with a bounded pool of sandbox workers.

``POST /verify`` ``{"task": row, "answer": text, "config": {...}, "deadline_s": 60}`` scores a
code answer (``cascade/Code-v0`` rules) and returns ``{"reward": {...}}``; ``POST /run``
``{"argv": [...], "files": {...}, "stdin": "...", "timeout_s": 2, "memory_mb": 256}`` runs one
command and returns the ``ExecResult``; ``GET /health`` reports load. At most ``workers`` requests
run at once (one per core by default); up to ``max_queue`` more wait; beyond that the answer is
``429`` at once (back-pressure: the client retries later). A request still queued or running at
its deadline gets ``503``/``504``. Start it with ``cascade-envs serve-sandbox``.

Bad requests get ``400`` with the field named (``{"error": ..., "field": "config.time_limit_s"}``),
never a ``500`` with a Python exception: mistyped fields, NaN/Infinity literals, JSON nested too
deeply. The HTTP layer is the kernel's ``cascade_envs.http_server``: a body over ``max_body_mb``
(8 MiB by default) gets ``413``; a connection silent for ``idle_timeout_s`` (30 s) is closed, and a
request that takes longer than ``request_timeout_s`` (60 s) to arrive gets ``408``. Parsing, task
checks and code-block extraction run on a worker thread, so one large request cannot stall the
event loop that serves the others.

It lives beside the code env it serves: the kernel's sandbox layer imports no env.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from typing import Any

from ...core import Reward, TaskError
from ...http_server import IDLE_TIMEOUT_S, MAX_BODY_MB, REQUEST_TIMEOUT_S, Limits, run_until_stopped, serve
from ...sandbox import get_sandbox
from ...sandbox.results import File, SandboxError, normalise_files
from .extract import as_answer, last_code_block
from .judge import Judge, JudgeConfig
from .task import CodeTask, parse_code_task

log = logging.getLogger("cascade_envs.envs.code.service")

JUDGE_OVERRIDES = {f.name for f in fields(JudgeConfig)} - {"cpp_flags", "cache_size", "max_concurrency"}
"""``JudgeConfig`` fields a request's ``config`` may set (other keys are ignored)."""


class HTTPError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.field = field

    def body(self) -> dict[str, Any]:
        return {"error": str(self), **({"field": self.field} if self.field else {})}


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def _bad(field: str, expected: str, value: Any) -> HTTPError:
    return HTTPError(400, f"{field!r}: expected {expected}, got {_show(value)}", field)


def _positive_number(value: Any, field: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise _bad(field, "a positive finite number", value)
    return float(value)


def _positive_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _bad(field, "a positive integer", value)
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value


def read_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object; ``HTTPError(400)`` for anything else."""
    try:
        payload = json.loads(body or b"{}", parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise HTTPError(400, "invalid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, NaN/Infinity
        raise HTTPError(400, f"invalid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise HTTPError(400, "the request body must be a JSON object")
    return payload


def _judge_types() -> dict[str, Any]:
    hints = typing.get_type_hints(JudgeConfig)
    return {name: hints[name] for name in JUDGE_OVERRIDES}


JUDGE_TYPES = _judge_types()


def judge_overrides(value: Any) -> dict[str, Any]:
    """The checked ``config`` of a ``/verify`` request (``null``: none)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad("config", "an object", value)
    overrides: dict[str, Any] = {}
    for key, item in value.items():
        if key not in JUDGE_TYPES:
            continue  # e.g. a newer client's setting: ignored, as before
        field, tp = f"config.{key}", JUDGE_TYPES[key]
        if tp is bool:
            if not isinstance(item, bool):
                raise _bad(field, "true or false", item)
            overrides[key] = item
        elif tp is int:
            overrides[key] = _positive_int(item, field)
        else:
            overrides[key] = _positive_number(item, field)
    return overrides


@dataclass
class VerifyRequest:
    task: CodeTask | None
    malformed: str | None
    """Why the task cannot be scored (a masked reward, not a 400: the row is data, not the request)."""
    answer: str
    """The answer reduced to its last code block (``extract.as_answer``)."""
    config: JudgeConfig
    deadline_s: float


@dataclass
class RunRequest:
    argv: list[str]
    files: dict[str, File]
    stdin: str
    timeout_s: float | None
    memory_mb: int | None
    deadline_s: float


class VerifyService:
    """Request handling, independent of the HTTP plumbing (so it can be tested directly)."""

    def __init__(
        self,
        workers: int | None = None,
        backend: str | None = None,
        max_queue: int | None = None,
        default_deadline_s: float = 600.0,
    ):
        self.workers = workers or os.cpu_count() or 1
        self.max_queue = self.workers * 64 if max_queue is None else max_queue
        self.default_deadline_s = default_deadline_s
        self.sandbox = get_sandbox(backend)
        self.judge = Judge(self.sandbox, JudgeConfig(max_concurrency=self.workers))
        self._slots = asyncio.Semaphore(self.workers)
        self.stats = {"running": 0, "queued": 0, "served": 0, "rejected": 0, "expired": 0, "errors": 0}

    async def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        routes: dict[
            tuple[str, str], tuple[Callable[[dict[str, Any]], Any], Callable[[Any], Awaitable[dict]]]
        ] = {
            ("POST", "/verify"): (self.prepare_verify, self._verify),
            ("POST", "/run"): (self.prepare_run, self._run),
        }
        if (method, path) == ("GET", "/health"):
            return 200, {
                "status": "ok",
                "backend": self.sandbox.name,
                "workers": self.workers,
                "max_queue": self.max_queue,
                **self.stats,
            }
        route = routes.get((method, path))
        if route is None:
            return 404, {"error": f"no route {method} {path}"}
        prepare, execute = route
        try:
            # parsing, field checks, task checks and extraction: CPU work kept off the event loop
            request = await asyncio.to_thread(lambda: prepare(read_json(body)))
            return 200, await self._admit(request.deadline_s, lambda: execute(request))
        except HTTPError as exc:
            return exc.status, exc.body()
        except Exception as exc:  # a bug or a sandbox failure: report it, keep serving
            self.stats["errors"] += 1
            log.exception("request failed")
            return 500, {"error": f"{type(exc).__name__}: {exc}"}

    def _deadline(self, payload: dict[str, Any]) -> float:
        value = payload.get("deadline_s")
        return self.default_deadline_s if value is None else _positive_number(value, "deadline_s")

    async def _admit(self, deadline_s: float, handler: Callable[[], Awaitable[dict]]) -> dict:
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
            return await asyncio.wait_for(handler(), max(0.001, deadline - time.monotonic()))
        except TimeoutError:
            self.stats["expired"] += 1
            raise HTTPError(504, f"deadline of {deadline_s:g}s passed while running") from None
        finally:
            self.stats["running"] -= 1
            self.stats["served"] += 1
            self._slots.release()

    def prepare_verify(self, payload: dict[str, Any]) -> VerifyRequest:
        """Check a ``/verify`` payload and do its CPU work (task parsing, extraction); blocking."""
        task, answer = payload.get("task"), payload.get("answer")
        if not isinstance(task, dict):
            raise _bad("task", "an object", task)
        if not isinstance(answer, str):
            raise _bad("answer", "a string", answer)
        config = JudgeConfig(**{**self.judge.config.__dict__, **judge_overrides(payload.get("config"))})
        deadline_s = self._deadline(payload)
        try:
            parsed, malformed = parse_code_task(task), None
        except TaskError as exc:
            parsed, malformed = None, f"malformed task: {exc}"
        return VerifyRequest(parsed, malformed, as_answer(last_code_block(answer)), config, deadline_s)

    async def _verify(self, request: VerifyRequest) -> dict[str, Any]:
        if request.task is None:
            return {"reward": Reward.failed(request.malformed or "malformed task").to_dict()}
        reward = await self.judge.ascore(request.task, request.answer, request.config)
        return {"reward": reward.to_dict()}

    async def verify(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Score one ``/verify`` payload (no queueing or deadline: ``handle`` adds those)."""
        return await self._verify(await asyncio.to_thread(self.prepare_verify, payload))

    def prepare_run(self, payload: dict[str, Any]) -> RunRequest:
        """Check a ``/run`` payload; blocking."""
        argv = payload.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise _bad("argv", "a non-empty list of strings", argv)
        files = payload.get("files")
        if files is None:
            files = {}
        if not isinstance(files, dict):
            raise _bad("files", "an object of {path: text}", files)
        for path, text in files.items():
            if not isinstance(text, str):
                raise _bad(f"files.{path}", "a string", text)
        try:
            checked = normalise_files(files)
        except ValueError as exc:
            raise HTTPError(400, f"'files': {exc}", "files") from None
        stdin = payload.get("stdin")
        if stdin is not None and not isinstance(stdin, str):
            raise _bad("stdin", "a string", stdin)
        timeout_s, memory_mb = payload.get("timeout_s"), payload.get("memory_mb")
        return RunRequest(
            argv,
            checked,
            stdin or "",
            None if timeout_s is None else _positive_number(timeout_s, "timeout_s"),
            None if memory_mb is None else _positive_int(memory_mb, "memory_mb"),
            self._deadline(payload),
        )

    async def _run(self, request: RunRequest) -> dict[str, Any]:
        try:
            result = await self.sandbox.arun(
                request.argv, request.files, request.stdin, request.timeout_s, request.memory_mb
            )
        except (ValueError, TypeError) as exc:
            raise HTTPError(400, str(exc)) from exc
        except SandboxError as exc:  # the sandbox could not start: the service's failure, not the request's
            raise HTTPError(500, f"sandbox failure: {exc}") from exc
        return result.to_dict()

    async def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Run one ``/run`` payload (no queueing or deadline: ``handle`` adds those)."""
        return await self._run(await asyncio.to_thread(self.prepare_run, payload))


async def start_server(
    host: str = "127.0.0.1",
    port: int = 8765,
    workers: int | None = None,
    backend: str | None = None,
    max_queue: int | None = None,
    *,
    max_body_mb: float = MAX_BODY_MB,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    token: str | None = None,
) -> tuple[asyncio.Server, VerifyService]:
    """Start serving on ``host:port`` (port 0 picks a free one) and return the server and service.

    ``token``: a bearer token every request must carry (else 401).
    """
    limits = Limits(max_body_mb, idle_timeout_s, request_timeout_s)
    service = VerifyService(workers, backend, max_queue)
    return await serve(service, host, port, limits, token=token), service


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


def serve_sandbox(
    host: str = "127.0.0.1",
    port: int = 8765,
    workers: int | None = None,
    backend: str | None = None,
    max_queue: int | None = None,
    *,
    max_body_mb: float = MAX_BODY_MB,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    token: str | None = None,
    allow_remote: bool = False,
) -> None:
    """Run the verification service until interrupted (the ``cascade-envs serve-sandbox`` command).

    Who may connect: ``cascade_envs.serving.auth.check_access`` (loopback, a bearer token, or
    ``allow_remote``).
    """
    from ...serving.auth import check_access

    required = check_access(host, token, allow_remote, what="sandbox service")

    async def main() -> None:
        server, service = await start_server(
            host,
            port,
            workers,
            backend,
            max_queue,
            max_body_mb=max_body_mb,
            idle_timeout_s=idle_timeout_s,
            request_timeout_s=request_timeout_s,
            token=required,
        )
        bound = server.sockets[0].getsockname()
        print(
            f"cascade-envs sandbox service on http://{bound[0]}:{bound[1]} "
            f"(backend {service.sandbox.name}, {service.workers} workers, queue {service.max_queue})",
            flush=True,
        )
        async with server:
            await server.serve_forever()

    run_until_stopped(main, "cascade-envs sandbox service")


def main(argv: list[str] | None = None) -> int:
    """``python -m cascade_envs.envs.code.service [OPTIONS]``: the same as ``cascade-envs serve-sandbox``."""
    import sys

    from ...cli import main as cli_main

    return cli_main(["serve-sandbox", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
