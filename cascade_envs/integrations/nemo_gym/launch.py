"""Start a resources server as a child process on a free local port, wait until it answers, stop it.

``ServerProcess(argv, env=...)`` runs ``argv`` (``{host}`` and ``{port}`` in it and in ``env``'s
values are filled in), writes its output to a log file, and is ready once anything answers HTTP at
its URL; a process that exits first, or is not ready within ``start_timeout_s``, is an error quoting
the end of its log. ``stop`` ends its process group (SIGTERM, then SIGKILL after a grace period); a
process never stopped is stopped when its ``ServerProcess`` is collected or the interpreter exits.

``nemo_gym_server(python, name, config)`` is NeMo Gym's own way to start one of its resources
servers without its CLI (and without Ray or a head server): ``python -m
resources_servers.<name>.app`` with the global config in ``NEMO_GYM_CONFIG_DICT`` and the server's
instance name in ``NEMO_GYM_CONFIG_PATH``, as NeMo Gym's CLI starts each server it runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from ...core import CascadeError

HOST = "127.0.0.1"
START_TIMEOUT_S = 180.0
"""Default wait for a started server to answer (a NeMo Gym server imports for several seconds)."""
STOP_GRACE_S = 5.0
LOG_TAIL_CHARS = 3000
SERVER_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def nemo_gym_server(
    python: str, name: str, config: Mapping[str, Any] | None = None
) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` that start NeMo Gym's resources server ``name`` (``resources_servers/<name>``)
    with ``python`` (an interpreter that has ``nemo-gym``); ``config``: fields of its instance config."""
    if not name or not set(name) <= SERVER_NAME_CHARS:
        raise CascadeError(
            f"a NeMo Gym resources server name is lower-case letters, digits and _, got {name!r}"
        )
    instance = {"entrypoint": "app.py", "host": "{host}", "port": "{port}", **(config or {})}
    global_config = {
        "head_server": {"host": "{host}", "port": "{head_port}"},
        "dry_run": False,
        name: {"resources_servers": {name: instance}},
    }
    env = {"NEMO_GYM_CONFIG_DICT": json.dumps(global_config), "NEMO_GYM_CONFIG_PATH": name}
    return [python, "-m", f"resources_servers.{name}.app"], env


class ServerProcess:
    """A server process started here, at ``url``, with its output in ``log``; see the module docstring."""

    def __init__(
        self,
        argv: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ):
        self.host, self.port = HOST, free_port()
        fill = {"host": self.host, "port": str(self.port), "head_port": str(free_port())}
        args = shlex.split(argv) if isinstance(argv, str) else list(argv)
        if not args:
            raise CascadeError("the server command is empty")
        self.argv = [_fill(a, fill) for a in args]
        self.url = f"http://{self.host}:{self.port}"
        self.log = Path(tempfile.mkdtemp(prefix="cascade-resources-")) / "server.log"
        extra = {k: _fill(v, fill) for k, v in (env or {}).items()}
        with self.log.open("wb") as out:
            try:
                self.process = subprocess.Popen(
                    self.argv,
                    env={**os.environ, **extra},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stop() ends whatever it spawned
                )
            except OSError as exc:
                raise CascadeError(f"cannot start the resources server {self.argv[0]!r}: {exc}") from None
        self._finalizer = weakref.finalize(self, _stop, self.process, self.log)
        try:
            self._wait_ready(start_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise CascadeError(
                    f"the resources server {shlex.join(self.argv)} exited with status {code} before it "
                    f"answered; the end of its output:\n{self.tail()}"
                )
            try:
                httpx.get(self.url + "/", timeout=2.0)
                return  # any HTTP answer: it is serving
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise CascadeError(
                    f"the resources server {shlex.join(self.argv)} did not answer at {self.url} within "
                    f"{timeout_s:g} s; the end of its output:\n{self.tail()}"
                )
            time.sleep(0.1)

    def tail(self) -> str:
        """The end of the server's output."""
        try:
            return self.log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no output)"

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """End the server's process group and remove its log."""
        self._finalizer()


def _fill(text: str, values: Mapping[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def _stop(process: subprocess.Popen[bytes], log: Path) -> None:
    if process.poll() is None:
        for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
    with contextlib.suppress(OSError):
        log.unlink(missing_ok=True)
        log.parent.rmdir()
