"""Sandboxes bound what they promise: memory written anywhere, the default choice, blame for a lost agent.

Each test is an attack through the public interface (``get_sandbox``, sessions, ``ExecResult``) with
the outcome the backend promises. Host memory is read from ``/proc/meminfo`` (``Shmem`` counts every
tmpfs page and System V segment on the host) while the attacking session is still open.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from cascade_envs.sandbox import SandboxError, get_sandbox

from .conftest import backend_or_skip

# Tests that fill or measure the host's shared memory (tmpfs, System V, Ray's object store) run on
# one xdist worker, one after another: the bounds tests read the host-wide Shmem figure.
pytestmark = pytest.mark.xdist_group("host-shared-memory")

PY = "/usr/bin/python3"
GB_AND_A_HALF = 1536

FILL = """import errno, os, sys
target, chunk, written, why = sys.argv[1], b"x" * (1 << 20), 0, "done"
try:
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    with open(target, "wb", buffering=0) as fh:
        while written < (LIMIT_MB << 20):
            written += fh.write(chunk)
except OSError as exc:
    why = errno.errorcode.get(exc.errno, str(exc.errno))
print(written >> 20, why)
""".replace("LIMIT_MB", str(GB_AND_A_HALF))

SYSV = {
    "shm": """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
libc.shmdt.argtypes = [ctypes.c_void_p]
size, held = 32 << 20, 0
while held < (LIMIT_MB << 20):
    ident = libc.shmget(0, size, 0o1600)      # IPC_PRIVATE, IPC_CREAT | 0600
    address = libc.shmat(ident, None, 0) if ident >= 0 else None
    if address in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(address, 1, size)           # touch every page, then detach: the segment stays
    libc.shmdt(address)
    held += size
print(held >> 20)
""",
    "msg": """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
class Message(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 8192)]
message, held = Message(1, b"x" * 8192), 0
while held < (LIMIT_MB << 20):
    queue = libc.msgget(0, 0o1600)
    if queue < 0:
        break
    while libc.msgsnd(queue, ctypes.byref(message), 8192, 0o4000) == 0:  # IPC_NOWAIT: till the queue is full
        held += 8192
print(held >> 20)
""",
    "sem": """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
held = 0
while held < (LIMIT_MB << 20) and libc.semget(0, 32000, 0o1600) >= 0:  # 32000 semaphores a set
    held += 32000 * 64
print(held >> 20)
""",
}
SYSV = {kind: source.replace("LIMIT_MB", str(GB_AND_A_HALF)) for kind, source in SYSV.items()}


def shmem_mb() -> float:
    """The host's shared memory (tmpfs files and System V segments), in MB."""
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no Shmem line in /proc/meminfo")


def healthy(session) -> None:
    res = session.run([PY, "-c", "print(sum(range(10)))"])
    assert res.ok and res.stdout == b"45\n", res


# ----- memory written anywhere is capped and counted ---------------------------------------------


def test_writes_anywhere_are_capped_by_the_sessions_memory():
    """1.5 GB written to /, /dev, /dev/shm, /tmp, the work dir...: the host holds at most memory_mb of it."""
    sb = backend_or_skip(
        "bwrap", memory_mb=256, file_mb=4096, timeout_s=30
    )  # caps: work 128, /tmp 64, shm 64
    targets = [
        "/fill",
        "/dev/fill",
        "/dev/shm/fill",
        "/tmp/fill",
        "fill",
        "/var/tmp/fill",
        "/usr/fill",
        "/proc/fill",
        "/sandbox/sub/fill",
    ]
    before = shmem_mb()
    session = sb.session(files={"fill.py": FILL})
    try:
        outcomes = {}
        for target in targets:
            res = session.run([PY, "fill.py", target])
            outcomes[target] = res
            if res.killed_by is None:
                mb, why = res.stdout.split()
                outcomes[target] = (int(mb), why.decode())
        grown = shmem_mb() - before  # measured while every file written is still there
        healthy(session)
    finally:
        session.close()
    assert grown < 256 + 64, (grown, outcomes)
    assert outcomes["/fill"] == (0, "EROFS") and outcomes["/dev/fill"] == (0, "EROFS"), outcomes
    assert outcomes["/dev/shm/fill"] == (64, "ENOSPC") and outcomes["/tmp/fill"] == (64, "ENOSPC"), outcomes
    for target in targets:
        outcome = outcomes[target]
        if isinstance(outcome, tuple):  # the write failed (read-only, absent, full) well short of 1.5 GB
            assert outcome[1] != "done" and outcome[0] <= 128, (target, outcome)
        else:  # or the command was stopped for it
            assert outcome.killed_by == "memory", (target, outcome)


def test_what_a_command_writes_counts_against_its_memory_limit():
    """With room to spare on disk (work dir 1 GB), files written in RAM still count against memory_mb."""
    sb = backend_or_skip("bwrap", memory_mb=256, file_mb=4096, timeout_s=30, workdir_mb=1024)
    before = shmem_mb()

    async def go():
        async with await sb.asession(files={"fill.py": FILL}) as s:
            small = await s.arun([PY, "-c", "open('small', 'wb').write(b'x' * (8 << 20))"], memory_mb=128)
            big = await s.arun([PY, "fill.py", "big"], memory_mb=128)
            grown = shmem_mb() - before
            return small, big, grown, await s.arun([PY, "-c", "print(6 * 7)"], memory_mb=128)

    small, big, grown, after = asyncio.run(go())
    assert small.ok, small  # a little is fine
    assert big.killed_by == "memory" and big.exit_code != 0, big
    assert grown < 128 + 256, grown  # killed within a few ms of crossing the limit
    assert after.ok and after.stdout == b"42\n"


def test_memory_limit_bounds_all_of_a_commands_processes_together(sandbox):
    """Eight processes of 100 MB each, every one under its own 256 MB address-space limit."""
    if sandbox.name == "local" and not sandbox.namespaces:
        pytest.skip("needs the agent to be PID 1")
    forks = (
        "import os, time\nfor _ in range(8):\n    if os.fork() == 0:\n"
        "        block = b'x' * (100 << 20)\n        time.sleep(3)\n        os._exit(0)\n"
        "time.sleep(2)\nprint('all resident')"
    )
    start = time.monotonic()
    res = sandbox.run([PY, "forks.py"], files={"forks.py": forks}, timeout_s=10)  # memory_mb=256
    assert res.killed_by == "memory" and b"all resident" not in res.stdout, res
    assert time.monotonic() - start < 2


@pytest.mark.parametrize("kind", sorted(SYSV))
def test_system_v_objects_are_counted_and_removed_after_each_command(kind):
    """Shared memory segments, message queues, semaphore sets outlive their process: not past the command."""
    sb = backend_or_skip("bwrap", memory_mb=256, timeout_s=30)
    before = shmem_mb()

    async def go():
        async with await sb.asession(files={"sysv.py": SYSV[kind]}) as s:
            res = await s.arun([PY, "sysv.py"])
            grown = shmem_mb() - before
            left = await s.arun(["cat", f"/proc/sysvipc/{kind}"])
            return res, grown, left

    res, grown, left = asyncio.run(go())
    assert res.killed_by == "memory", res
    assert grown < 256, grown
    assert left.ok and len(left.stdout.strip().splitlines()) == 1, left.stdout  # the header alone


# ----- the default backend is bwrap or a refusal, never a silent downgrade -----------------------


def test_without_bubblewrap_the_default_is_a_one_line_refusal(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a plain `pip install`: no bwrap on PATH
    with pytest.raises(SandboxError) as info:
        get_sandbox()
    message = str(info.value)
    assert "\n" not in message and "bubblewrap" in message and "docker" in message and "'local'" in message
    local = get_sandbox("local", timeout_s=3)  # a weaker backend only when named
    assert local.name == "local" and local.run([PY, "-c", "print(1)"]).stdout == b"1\n"


def test_the_chosen_backend_is_logged_once_per_run():
    backend_or_skip("bwrap")
    code = (
        "import logging; logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')\n"
        "from cascade_envs.sandbox import get_sandbox\n"
        "for _ in range(3): get_sandbox()\n"
        "for _ in range(2): get_sandbox('local')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stderr.splitlines() if "sandbox backend" in line]
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith("INFO") and "'bwrap'" in lines[0] and "default" in lines[0]
    assert lines[1].startswith("WARNING") and "'local'" in lines[1] and "named" in lines[1]


# ----- who is to blame when the agent goes -------------------------------------------------------

ATTACKS = {
    "kill -9 parent": "os.kill(os.getppid(), signal.SIGKILL)",
    "killpg parent": "os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
    "SIGTERM parent": "os.kill(os.getppid(), signal.SIGTERM)",
    "SIGINT parent": "os.kill(os.getppid(), signal.SIGINT)",
}
PROTECTED_ONLY = {
    "kill -9 1": "os.kill(1, signal.SIGKILL)",
    "kill -9 everything": "os.kill(-1, signal.SIGKILL)",
    "ptrace the agent (it stops, never answers)": (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.ptrace(16, os.getppid(), None, None) != 0:  # PTRACE_ATTACH\n"
        "    raise OSError(ctypes.get_errno(), 'attach refused')\n"
        "time.sleep(30)"
    ),
    "write into the agent's pipes": (
        "for fd in os.listdir('/proc/1/fd'):\n"
        "    try:\n"
        "        with open(f'/proc/1/fd/{fd}', 'wb', buffering=0) as fh: fh.write(bytes([7]) * 64)\n"
        "    except OSError as exc:\n"
        "        print(fd, exc)"
    ),
}


def attack(source: str) -> str:
    body = "\n".join("    " + line for line in source.splitlines())
    return (
        f"import os, signal, time\ntry:\n{body}\nexcept OSError as exc:\n    print('refused', exc)\n"
        "time.sleep(0.2)\nprint('alive')"
    )


@pytest.mark.parametrize("name", sorted({**ATTACKS, **PROTECTED_ONLY}))
def test_where_the_agent_is_pid_1_the_program_cannot_kill_or_fool_it(sandbox, name):
    """bwrap and local-with-namespaces: the attack fails, the command ends normally, the session lives."""
    if sandbox.name == "local" and not sandbox.namespaces:
        pytest.skip("local without user namespaces: see the unprotected cases")
    source = {**ATTACKS, **PROTECTED_ONLY}[name]

    async def go():
        async with await sandbox.asession(files={"a.py": attack(source)}) as s:
            res = await s.arun([PY, "a.py"])
            after = await s.arun([PY, "-c", "print(45)"])
            return res, after

    res, after = asyncio.run(go())
    assert res.killed_by not in ("sandbox", "agent_killed"), res  # at most it killed itself (killpg(0))
    assert after.ok and after.stdout == b"45\n", after


@pytest.fixture(params=["unsafe-subprocess", "local-without-namespaces"])
def unprotected(request, monkeypatch):
    """Backends where the program can signal its agent (same uid, no PID namespace)."""
    if request.param == "local-without-namespaces":
        from cascade_envs.sandbox import local

        monkeypatch.setattr(local, "_unshare_prefix", lambda uid, network: ())
        return get_sandbox("local", timeout_s=3)
    return get_sandbox("unsafe-subprocess", timeout_s=3)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_where_the_program_can_kill_its_agent_doing_so_is_its_own_failure(unprotected, name):
    async def go():
        async with await unprotected.asession(files={"a.py": attack(ATTACKS[name])}) as s:
            return await s.arun([PY, "a.py"]), await s.arun([PY, "-c", "print(45)"])

    res, after = asyncio.run(go())
    assert res.killed_by == "agent_killed" and "killed the sandbox agent" in res.error, res
    assert after.killed_by == "agent_killed", after  # the rest of the response is its doing too


def test_stopping_the_agent_is_the_programs_failure_too(unprotected):
    start = time.monotonic()
    res = unprotected.run(
        [PY, "-c", "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)"], timeout_s=0.5
    )
    assert res.killed_by == "agent_killed" and "stopped the sandbox agent" in res.error, res
    assert time.monotonic() - start < 15


def test_a_sandbox_lost_for_reasons_of_its_own_still_says_so(bwrap):
    """The host loses the agent under a command (e.g. the OOM killer): infrastructure, not the program."""

    async def go():
        async with await bwrap.asession() as s:
            run = asyncio.create_task(s.arun(["sleep", "2"]))
            await asyncio.sleep(0.3)
            os.killpg(s.proc.pid, 9)
            return await run

    res = asyncio.run(go())
    assert res.killed_by == "sandbox" and "agent exited" in res.error, res
