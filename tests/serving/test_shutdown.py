"""SIGTERM (what ``docker stop``, Kubernetes and systemd send) ends each server as Ctrl-C does: its open
sessions and requests are closed, the process exits 0 and says so."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from cascade_envs.sandbox import get_sandbox
from tests.sandbox.conftest import host_pids_of


def start(*argv: str) -> tuple[subprocess.Popen[str], str]:
    """``cascade-envs ARGV --port 0`` in its own process, and the URL it prints once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cascade_envs", *argv, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    url = re.search(r"http://127\.0\.0\.1:\d+", line)
    if not url:
        proc.kill()
        pytest.fail(line + proc.stderr.read())
    return proc, url.group(0)


def terminate(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, then the server's stderr; it must exit 0 within 30 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, err
    return err


def test_sigterm_closes_the_open_sessions_of_serve():
    proc, url = start("serve", "--protocol", "openenv", "cascade/MCQA-v0")

    async def scenario() -> str:
        async with ws_connect(url.replace("http://", "ws://") + "/ws") as ws:
            await ws.send('{"type": "reset", "data": {"index": 0}}')
            assert '"observation"' in await asyncio.wait_for(ws.recv(), 30)
            stopping = asyncio.create_task(asyncio.to_thread(terminate, proc))
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001  # "going away"
            return await stopping

    try:
        assert "cascade-envs openenv server: stopped (SIGTERM)" in asyncio.run(scenario())
    finally:
        proc.kill()


def sandboxed(marker: str) -> bool:
    """Whether a program of the service's sandbox (the default backend) with ``marker`` still runs."""
    uid = get_sandbox().run_as
    return bool(host_pids_of(os.getuid() if uid is None else uid, "python3", marker))


def test_sigterm_ends_serve_sandbox_and_the_programs_it_runs():
    marker = f"sleep-{uuid.uuid4().hex}"
    proc, url = start("serve-sandbox", "--workers", "1")
    replies: list[object] = []

    def run() -> None:
        program = f"import time; time.sleep(120)  # {marker}"
        try:
            replies.append(httpx.post(url + "/run", json={"argv": ["python3", "-c", program]}, timeout=60))
        except httpx.HTTPError as exc:
            replies.append(exc)

    client = threading.Thread(target=run)
    try:
        client.start()
        deadline = time.monotonic() + 30
        while not sandboxed(marker):
            assert time.monotonic() < deadline, "the sandboxed program never started"
            time.sleep(0.1)
        started = time.monotonic()
        assert "cascade-envs sandbox service: stopped (SIGTERM)" in terminate(proc)
        client.join(30)
        assert replies and time.monotonic() - started < 30  # the request ended with the server
        deadline = time.monotonic() + 10
        while sandboxed(marker):
            assert time.monotonic() < deadline, "the sandboxed program outlived the service"
            time.sleep(0.1)
    finally:
        proc.kill()
        client.join(60)


def test_sigterm_ends_serve_judge_while_it_generates():
    proc, url = start("serve-judge", "--model", "embedded")
    request = {"model": "judge", "messages": [{"role": "user", "content": "Count to a thousand."}]}

    def ask() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the server goes away mid-reply
            httpx.post(url + "/v1/chat/completions", json=request, timeout=60)

    client = threading.Thread(target=ask, daemon=True)
    try:
        client.start()
        time.sleep(1.0)  # the reply is being generated (512 tokens take the 135M model several seconds)
        assert "cascade-envs judge: stopped (SIGTERM)" in terminate(proc)
    finally:
        proc.kill()
