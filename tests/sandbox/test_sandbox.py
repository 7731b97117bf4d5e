"""The sandbox protocol on every backend that works here: results, limits, sessions, registry."""

from __future__ import annotations

import asyncio
import sys

import pytest

from cascade_envs.registry import sandboxes
from cascade_envs.sandbox import (
    EXECUTABLE,
    ExecResult,
    File,
    SandboxError,
    available_backends,
    default_backend,
    get_sandbox,
)
from cascade_envs.sandbox.unsafe import UnsafeSubprocessSandbox

PY = "/usr/bin/python3"


def test_builtin_backends_are_registered_through_the_plugin_hook():
    for name in ("bwrap", "local", "docker", "unsafe-subprocess"):
        assert name in sandboxes
        assert sandboxes.get(name).plugin == "cascade_envs.sandbox.plugin"


def test_default_backend_is_bwrap_or_a_refusal_never_a_weaker_one():
    if available_backends()["bwrap"] is None:
        assert default_backend() == "bwrap" and get_sandbox().name == "bwrap"
    else:
        with pytest.raises(SandboxError, match="install bubblewrap"):
            get_sandbox()


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(KeyError, match=r"unknown sandbox backend 'bwarp'.*did you mean 'bwrap'"):
        get_sandbox("bwarp")


def test_run_returns_output_exit_code_and_measurements(sandbox):
    res = sandbox.run(
        [PY, "main.py", "x"],
        files={
            "main.py": "import sys\nprint(input()[::-1], sys.argv[1])\nsys.stderr.write('err')\nsys.exit(3)"
        },
        stdin="abc\n",
    )
    assert isinstance(res, ExecResult)
    assert (res.exit_code, res.stdout, res.stderr, res.killed_by) == (3, b"cba x\n", b"err", None)
    assert 0 < res.wall_s < 3 and res.cpu_s > 0 and res.peak_memory_mb > 1
    assert not res.ok


def test_large_stdin_and_stdout_round_trip(sandbox):
    data = b"".join(b"%d\n" % i for i in range(140_000))  # ~0.9 MB through both pipes (limit: 1 MiB)
    res = sandbox.run(
        [PY, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"], stdin=data, timeout_s=10
    )
    assert res.ok and res.stdout == data and not res.truncated


def test_session_keeps_its_work_dir_and_runs_many_commands(sandbox):
    async def go():
        async with await sandbox.asession(files={"a.txt": "hello"}) as s:
            await s.awrite({"sub/b.sh": File(b"#!/bin/sh\necho $1-$(cat a.txt)\n", EXECUTABLE)})
            outs = [(await s.arun(["sub/b.sh", str(i)])).stdout for i in range(3)]
            assert await s.aread("a.txt") == b"hello"
            await s.arun(["sh", "-c", "echo made > c.txt"])
            return outs, await s.aread("c.txt")

    outs, made = asyncio.run(go())
    assert outs == [b"0-hello\n", b"1-hello\n", b"2-hello\n"] and made == b"made\n"


def test_sync_session_face(sandbox):
    s = sandbox.session(files={"x.py": "print(6*7)"})
    try:
        assert s.run([PY, "x.py"]).stdout == b"42\n"
    finally:
        s.close()
    assert s.run([PY, "x.py"]).killed_by == "sandbox"  # a closed session says so, it does not hang


def test_missing_program_is_reported_not_raised(sandbox):
    res = sandbox.run(["/no/such/program"])
    assert res.exit_code == 127 and "could not start" in res.error


def test_file_paths_must_stay_inside_the_work_dir(sandbox):
    for bad in ("/etc/passwd", "../x", "a/../../x"):
        with pytest.raises(ValueError, match="relative"):
            sandbox.run([PY, "-c", "pass"], files={bad: "x"})


def test_concurrent_sessions_do_not_share_files(sandbox):
    async def one(i):
        async with await sandbox.asession(files={"id.txt": str(i)}) as s:
            await asyncio.sleep(0.01)
            return (await s.arun(["cat", "id.txt"])).stdout

    async def go():
        return await asyncio.gather(*(one(i) for i in range(6)))

    assert asyncio.run(go()) == [str(i).encode() for i in range(6)]


def test_unsafe_backend_exists_only_by_name_and_still_applies_limits():
    sb = get_sandbox("unsafe-subprocess", timeout_s=1)
    assert not sb.isolated
    res = sb.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout_s=0.3)
    assert res.killed_by == "timeout" and res.wall_s < 2


def test_docker_stream_demultiplexing():
    from cascade_envs.sandbox.docker import HEADER, demux

    stream = bytearray(HEADER.pack(1, 3) + b"abc" + HEADER.pack(2, 2) + b"er" + HEADER.pack(1, 5) + b"de")
    frames, rest = demux(stream)
    assert frames == [(1, b"abc"), (2, b"er")] and bytes(rest) == HEADER.pack(1, 5) + b"de"


def test_a_backend_that_cannot_start_raises_a_sandbox_error():
    sb = get_sandbox("unsafe-subprocess", python="/nonexistent/python3")
    with pytest.raises(SandboxError, match="did not start"):
        sb.session()
    with pytest.raises(
        SandboxError, match="did not start"
    ):  # never an empty result read as the program's output
        sb.run(["true"])


class EchoLaunchSandbox(UnsafeSubprocessSandbox):
    """A third-party backend: only ``_launch`` to write (here: the unsafe one, with a marker variable)."""

    name = "acme-test"

    def _launch(self, network):
        launch = super()._launch(network)
        launch.env["ACME"] = "1"
        return launch


def test_third_party_backends_plug_in_through_the_registry():
    from cascade_envs.registry import Spec

    sandboxes.register("acme-test", Spec("acme-test", f"{__name__}:EchoLaunchSandbox", plugin="acme"))
    try:
        sb = get_sandbox("acme-test")
        assert available_backends()["acme-test"] is None
        assert sb.run([sys.executable, "-c", "print(6 * 7)"]).stdout == b"42\n"
        session = sb.session()
        try:
            assert session.launch.env["ACME"] == "1"
        finally:
            session.close()
    finally:
        sandboxes.unregister("acme-test")
