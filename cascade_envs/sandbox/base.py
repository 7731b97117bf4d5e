"""The sandbox protocol: one-shot ``arun`` and long-lived sessions, both served by an in-sandbox agent.

A backend only says how to start ``python3 -c <agent> <workdir>`` inside its isolation
(``Sandbox._launch``). Everything else — writing files, running commands with limits, reading
results back, killing a sandbox that stops answering — is this module, once.

Who is to blame when a sandbox is lost under a command: where the agent is PID 1 of its own PID
namespace (``Launch.agent_protected``: bwrap, local with namespaces, docker) nothing the command
does can signal it, so a loss is the infrastructure's (``killed_by="sandbox"``, which the code
judge masks). Where the command can signal its agent (``unsafe-subprocess``, ``local`` without
namespaces), an agent that died from a signal or sits stopped while the command ran was killed or
stopped by it: ``killed_by="agent_killed"``, a failure the program caused (a 0, never a mask).
Losses outside a command (start, file transfer) and agents that exit or stall on their own stay
infrastructure failures everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from ..env import run_sync
from . import protocol
from .results import ExecResult, File, FileData, SandboxError, normalise_files
from .workspace import Workspace, source_files

STREAM_LIMIT = 1 << 28
"""Largest byte string accepted from an agent (a file read back, or a capped output)."""
START_TIMEOUT_S = 20.0
GRACE_S = 5.0
"""How long past a command's own timeout the host waits for the agent before declaring it lost."""
NOBODY = 65534


@cache
def agent_source() -> str:
    """The agent's source, passed with ``python3 -c`` so nothing has to be mounted for it."""
    return (Path(__file__).with_name("agent.py")).read_text()


def default_python() -> str:
    """The interpreter that runs the agent and Python solutions inside the sandbox.

    ``/usr/bin/python3`` when present (visible in every backend, readable by any uid), else the
    base interpreter of this process.
    """
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys._base_executable  # type: ignore[attr-defined]


@dataclass
class Launch:
    """How a backend starts the agent: the argv and environment, and what to clean up after."""

    argv: list[str]
    workdir: str
    env: dict[str, str] = field(default_factory=lambda: {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    user: int | None = None
    network: bool = False
    cleanup: list[str] = field(default_factory=list)
    """Host directories removed when the session closes."""
    agent_protected: bool = False
    """True when nothing the agent runs can signal it (it is PID 1 of its own PID namespace)."""
    nproc_rlimit: bool = True
    """Bound a command's processes with ``RLIMIT_NPROC`` (per uid); False where the backend bounds them per
    sandbox itself (docker's pids limit)."""


class Session:
    """A live sandbox with a persistent work dir: write files once, run many commands in it.

    Commands run one at a time. Use ``async with await sandbox.asession() as s:``.
    """

    def __init__(self, launch: Launch, sandbox: Sandbox, workspace: Workspace | None = None):
        self.launch = launch
        self.sandbox = sandbox
        self.workspace = workspace
        """The session's workspace (``workspace.py``), or ``None`` for a plain scratch-dir session."""
        self.backend = sandbox.name
        self.workdir = launch.workdir
        """Where commands run, as they see it (a workspace's ``workdir``, or the backend's scratch dir)."""
        self.defaults = dict(sandbox.defaults)
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.StreamReader
        self._writer: Any = None
        self.lost: str | None = None
        self.lost_to_program = False
        """The sandbox was lost because the command it ran killed or stopped its agent."""
        self._lock = asyncio.Lock()

    async def start(self) -> Session:
        """Start the agent and wait for its ready line; a failure raises ``SandboxError``."""
        try:
            await self._open()
            try:
                ready = await asyncio.wait_for(protocol.read_answer(self._reader, 64), START_TIMEOUT_S)
            except (asyncio.IncompleteReadError, SandboxError):
                ready = None
            if ready != b"ready":
                raise SandboxError(f"{self.backend} sandbox did not start: {await self._stderr_tail()}")
        except (TimeoutError, OSError) as exc:
            await self.aclose()
            why = f"no answer within {START_TIMEOUT_S:g}s" if isinstance(exc, TimeoutError) else f"{exc}"
            raise SandboxError(f"{self.backend} sandbox did not start: {why}") from exc
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _open(self) -> None:
        """Start the agent process; set ``_reader`` (its stdout) and ``_writer`` (its stdin)."""
        self.proc = await asyncio.create_subprocess_exec(
            *self.launch.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.launch.env,
            limit=STREAM_LIMIT,
            start_new_session=True,
            **as_user(self.launch.user),
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self._reader, self._writer = self.proc.stdout, self.proc.stdin

    async def _stderr_tail(self) -> str:
        if self.proc is None or self.proc.stderr is None:
            return ""
        self._kill()
        with contextlib.suppress(Exception):
            data = await asyncio.wait_for(self.proc.stderr.read(), 2.0)
            return data[-2000:].decode("utf-8", errors="replace").strip() or "(no error output)"
        return "(no error output)"

    async def _call(self, request: dict[str, Any], timeout_s: float) -> bytes | ExecResult:
        """Send one request and wait for its answer; a sandbox that fails to answer is killed."""
        if self.lost:
            raise SandboxError(f"sandbox already lost: {self.lost}")
        if self._writer is None:
            raise SandboxError("session not started")
        limit = int(request.get("output_limit", 0)) or STREAM_LIMIT
        try:
            self._writer.write(protocol.encode(request))
            await self._writer.drain()
            return await asyncio.wait_for(protocol.read_answer(self._reader, limit), timeout_s)
        except asyncio.CancelledError:
            self.lost = f"{self.backend} sandbox abandoned: the caller was cancelled"
            self._kill()
            raise
        except SandboxError as exc:
            if str(exc).startswith("agent error:"):
                raise  # the agent answered: the session is still fine
            self.lost = f"{self.backend} sandbox lost: {exc}"
            self._kill()
            raise SandboxError(self.lost) from exc
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError) as exc:
            timed_out = isinstance(exc, TimeoutError)
            culprit = await self._program_culprit(timed_out) if request.get("op") == "run" else None
            what = "did not answer in time" if timed_out else "the agent exited"
            self.lost = f"{self.backend} sandbox lost: " + (f"the program {culprit}" if culprit else what)
            self.lost_to_program = culprit is not None
            self._kill()
            raise SandboxError(self.lost) from exc

    async def _program_culprit(self, timed_out: bool) -> str | None:
        """What the running command did to the agent, where it can reach it (``None``: not its doing)."""
        proc = self.proc
        if self.launch.agent_protected or proc is None:
            return None
        if timed_out:
            try:
                with open(f"/proc/{proc.pid}/stat", "rb") as fh:
                    state = fh.read().rpartition(b")")[2].split()[0]
            except (OSError, IndexError):
                return None
            return "stopped the sandbox agent" if state in (b"T", b"t") else None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 1.0)
        code = proc.returncode
        return f"killed the sandbox agent (signal {-code})" if code is not None and code < 0 else None

    async def arun(
        self,
        argv: Sequence[str],
        stdin: bytes | str = b"",
        *,
        timeout_s: float | None = None,
        memory_mb: int | None = None,
        output_limit_mb: float | None = None,
        cwd: str = ".",
        env: Mapping[str, str] | None = None,
        file_mb: int | None = None,
    ) -> ExecResult:
        """Run ``argv`` in the work dir (``file_mb``: the largest file it may write, default the sandbox's).

        A sandbox that dies under the command gives ``killed_by="sandbox"``, or ``"agent_killed"``
        when the command itself killed or stopped the agent (see the module docstring).
        """
        if isinstance(stdin, str):
            stdin = stdin.encode()
        timeout = float(timeout_s if timeout_s is not None else self.defaults["timeout_s"])
        request = {
            "op": "run",
            "argv": [str(a) for a in argv],
            "stdin": bytes(stdin),
            "timeout_s": timeout,
            "memory_mb": int(memory_mb if memory_mb is not None else self.defaults["memory_mb"]),
            "output_limit": int((output_limit_mb or self.defaults["output_limit_mb"]) * (1 << 20)),
            "file_mb": int(file_mb if file_mb is not None else self.defaults["file_mb"]),
            "nproc": int(self.defaults["nproc"]) if self.launch.nproc_rlimit else 0,
            "cwd": cwd,
        }
        if env is None and self.workspace is not None:
            env = self.workspace.command_env(self.workdir)
        if env is not None:
            request["env"] = {str(k): str(v) for k, v in env.items()}
        start = time.monotonic()
        async with self._lock:
            try:
                result = await self._call(request, timeout + GRACE_S)
            except SandboxError as exc:
                if self.lost_to_program:
                    return ExecResult(
                        -9, wall_s=time.monotonic() - start, killed_by="agent_killed", error=str(exc)
                    )
                return ExecResult.lost(str(exc), time.monotonic() - start)
        if not isinstance(result, ExecResult):
            return ExecResult.lost(f"{self.backend} agent gave no result", time.monotonic() - start)
        return result

    async def awrite(self, files: Mapping[str, FileData | File]) -> None:
        """Write files (relative paths) into the work dir."""
        payload = {p: (f.data, f.mode) for p, f in normalise_files(files).items()}
        if payload:
            async with self._lock:
                await self._call({"op": "write", "files": payload}, 60.0)

    async def aread(self, path: str, limit_mb: float = 64) -> bytes:
        """Read a file back from the work dir (e.g. a compiled binary to cache)."""
        async with self._lock:
            data = await self._call({"op": "read", "path": path, "limit": int(limit_mb * (1 << 20))}, 60.0)
        if not isinstance(data, bytes):
            raise SandboxError(f"reading {path!r}: unexpected answer")
        return data

    def _kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, 9)

    async def aclose(self) -> None:
        """Stop the sandbox (killing anything still running in it) and remove its host files."""
        self._writer = None
        await self._terminate()
        for path in self.launch.cleanup:
            await asyncio.to_thread(shutil.rmtree, path, True)
        self.lost = self.lost or "session closed"

    async def _terminate(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.returncode is None and proc.stdin is not None and not self.lost:
                with contextlib.suppress(Exception):
                    proc.stdin.write(protocol.encode({"op": "exit"}))
                    await asyncio.wait_for(proc.wait(), 1.0)
            if proc.returncode is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, 9)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 5.0)
            if proc.stdin is not None:
                proc.stdin.close()
            # Close the pipes now: a sandbox killed from outside may still hold them for a moment, and a
            # transport left open past its event loop complains when it is collected.
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # sync face
    def run(self, argv: Sequence[str], stdin: bytes | str = b"", **kwargs: Any) -> ExecResult:
        return run_sync(self.arun(argv, stdin, **kwargs))

    def write(self, files: Mapping[str, FileData | File]) -> None:
        run_sync(self.awrite(files))

    def read(self, path: str, limit_mb: float = 64) -> bytes:
        return run_sync(self.aread(path, limit_mb))

    def close(self) -> None:
        run_sync(self.aclose())


class Sandbox(ABC):
    """A sandbox backend. Subclasses implement ``_launch``; ``arun``/``asession`` come from here.

    Defaults (per command unless overridden): ``timeout_s``, ``memory_mb`` (the address space of each
    process; where the agent is PID 1 with RAM-backed mounts of its own (bwrap) or its own IPC
    namespace (local with namespaces), also the command's total: the resident memory of all its
    processes plus what it leaves in those mounts and in System V objects), ``output_limit_mb``
    (stdout and stderr each), ``file_mb`` (largest file a command may write), ``nproc`` (processes
    per sandbox, where the backend can enforce it).
    """

    name: ClassVar[str] = ""
    isolated: ClassVar[bool] = True
    caveat: ClassVar[str] = ""
    """How this backend falls short of the default's promise (logged when it is chosen); empty: it does not."""

    def __init__(
        self,
        *,
        python: str | None = None,
        timeout_s: float = 10.0,
        memory_mb: int = 512,
        output_limit_mb: float = 16,
        file_mb: int = 64,
        nproc: int = 64,
        run_as: int | None = None,
    ):
        self.python = python or default_python()
        self.defaults = {
            "timeout_s": timeout_s,
            "memory_mb": memory_mb,
            "output_limit_mb": output_limit_mb,
            "file_mb": file_mb,
            "nproc": nproc,
        }
        # As root, RLIMIT_NPROC is not enforced and every file is readable: drop to an unprivileged uid.
        self.run_as = (
            run_as if run_as is not None else (NOBODY if self.isolated and os.geteuid() == 0 else None)
        )

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this backend cannot run here (``None`` when it can)."""
        return None

    @abstractmethod
    def _launch(self, network: bool) -> Launch:
        """How to start the agent for one session."""

    def _launch_workspace(self, network: bool, workspace: Workspace) -> Launch:
        """How to start the agent for a workspace session (``workspace.py``); backends that have one override it."""
        raise SandboxError(
            f"the {self.name!r} sandbox backend has no workspace mode (use bwrap, local or docker)"
        )

    session_class: ClassVar[type[Session]] = Session

    async def asession(
        self,
        *,
        network: bool = False,
        files: Mapping[str, FileData | File] | None = None,
        workspace: Workspace | None = None,
    ) -> Session:
        """Start a long-lived sandbox; ``files`` are written into its work dir.

        With ``workspace`` the session's file system is that workspace's (its ``source`` copied into
        its ``workdir`` before ``files``); a copy that fails closes the session and raises ``SandboxError``.
        """
        launch = self._launch(network) if workspace is None else self._launch_workspace(network, workspace)
        session = await self.session_class(launch, self, workspace).start()
        try:
            if workspace is not None and workspace.source is not None:
                for chunk in await asyncio.to_thread(source_files, workspace.source, workspace.workdir_mb):
                    await session.awrite(chunk)
            if files:
                await session.awrite(files)
        except BaseException:
            await session.aclose()
            raise
        return session

    async def arun(
        self,
        argv: Sequence[str],
        files: Mapping[str, FileData | File] | None = None,
        stdin: bytes | str = b"",
        timeout_s: float | None = None,
        memory_mb: int | None = None,
        network: bool = False,
    ) -> ExecResult:
        """Run one command in a fresh sandbox holding ``files``.

        A sandbox that cannot start raises ``SandboxError`` (never an empty result); one lost under the
        command gives ``killed_by="sandbox"`` (``Session.arun``).
        """
        async with await self.asession(network=network, files=files) as session:
            return await session.arun(argv, stdin, timeout_s=timeout_s, memory_mb=memory_mb)

    def run(
        self,
        argv: Sequence[str],
        files: Mapping[str, FileData | File] | None = None,
        stdin: bytes | str = b"",
        timeout_s: float | None = None,
        memory_mb: int | None = None,
        network: bool = False,
    ) -> ExecResult:
        return run_sync(self.arun(argv, files, stdin, timeout_s, memory_mb, network))

    def session(
        self, *, network: bool = False, files: Mapping[str, FileData | File] | None = None
    ) -> Session:
        return run_sync(self.asession(network=network, files=files))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(python={self.python!r}, run_as={self.run_as})"


def as_user(uid: int | None) -> dict[str, Any]:
    """``subprocess`` arguments that run a child as ``uid`` (with no supplementary groups), or none."""
    return {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
