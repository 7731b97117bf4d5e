"""Hostile programs: each is contained and reported, the host stays healthy, the next run is normal.

Limits are small (seconds, tens of MB) so every case stays fast and bounded.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from .conftest import host_pids_of, unique_marker

# Tests that fill or measure the host's shared memory (tmpfs, System V, Ray's object store) run on
# one xdist worker, one after another: the bounds tests read the host-wide Shmem figure.
pytestmark = pytest.mark.xdist_group("host-shared-memory")

PY = "/usr/bin/python3"


def healthy(sb) -> None:
    """The sandbox still serves a normal request right after the attack."""
    res = sb.run([PY, "-c", "print(sum(range(10)))"])
    assert res.ok and res.stdout == b"45\n", res


def py(sb, code: str, **kw):
    return sb.run([PY, "main.py"], files={"main.py": code}, **kw)


def test_no_network(sandbox):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        res = py(
            sandbox,
            f"import socket\ns=socket.socket(); s.settimeout(1)\ns.connect(('127.0.0.1', {port}))\n"
            "print('connected')",
        )
        assert res.exit_code != 0 and b"connected" not in res.stdout
        res = py(sandbox, "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)")
        assert res.exit_code != 0
    finally:
        listener.close()
    healthy(sandbox)


def test_fork_bomb(sandbox):
    start, marker = time.monotonic(), unique_marker()
    res = sandbox.run(["sh", "-c", "b() { b | b & }; b; sleep 5", marker], timeout_s=2)  # $0: the bomb's mark
    res2 = py(sandbox, "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", timeout_s=2)
    assert time.monotonic() - start < 12
    assert res.killed_by == "timeout" and res2.killed_by in ("timeout", "cpu_time")
    healthy(sandbox)
    if sandbox.run_as is not None:  # nothing of the bomb survives on the host
        time.sleep(0.2)
        assert host_pids_of(sandbox.run_as, "sh", marker) == []


def test_memory_bomb(sandbox):
    res = py(sandbox, "x = bytearray(4 << 30)", memory_mb=128)
    assert res.killed_by == "memory" and res.exit_code != 0
    res = py(sandbox, "x = []\nwhile True: x.append(' ' * (1 << 20))", memory_mb=128)
    assert res.killed_by == "memory" and res.peak_memory_mb < 160
    healthy(sandbox)


def test_disk_filling(sandbox):
    res = py(sandbox, "with open('big', 'wb') as f:\n    while True: f.write(b'x' * (1 << 20))")
    assert res.killed_by == "file_size"  # file_mb=8
    healthy(sandbox)


def test_disk_filling_with_many_files_hits_the_tmpfs_cap(bwrap):
    res = py(
        bwrap, "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (4 << 20)); i += 1", timeout_s=5
    )
    assert res.exit_code != 0 and b"No space left" in res.stderr  # workdir_mb=16
    healthy(bwrap)


def test_infinite_loop(sandbox):
    res = py(sandbox, "while True: pass", timeout_s=1)
    assert res.killed_by in ("timeout", "cpu_time") and res.wall_s < 2.5
    healthy(sandbox)


def test_sleeping_forever(sandbox):
    res = py(sandbox, "import time\ntime.sleep(10**6)", timeout_s=0.5)
    assert res.killed_by == "timeout" and 0.4 < res.wall_s < 2
    healthy(sandbox)


def test_host_files_are_out_of_reach(bwrap, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    home = os.path.expanduser("~")
    for path in ("/etc/shadow", "/etc/passwd", str(secret), os.path.join(home, ".bashrc"), home):
        res = py(
            bwrap, f"import os\np = {path!r}\nprint(open(p).read() if os.path.isfile(p) else os.listdir(p))"
        )
        assert res.exit_code != 0 and b"TOP-SECRET" not in res.stdout and b"root:" not in res.stdout, path
    res = py(bwrap, "import os\nprint(' '.join(os.listdir('/')))")
    visible = set(res.stdout.decode().split())
    assert {"usr", "proc", "dev", "tmp", "sandbox"} <= visible
    assert visible <= {"bin", "dev", "lib", "lib32", "lib64", "proc", "sandbox", "sbin", "tmp", "usr"}


def test_local_backend_cannot_read_root_only_files():
    from cascade_envs.sandbox import get_sandbox

    sb = get_sandbox("local", timeout_s=3)
    if sb.run_as is None:
        pytest.skip("file-mode protection needs the host to run as root (the sandbox then drops to nobody)")
    res = sb.run([PY, "-c", "print(open('/etc/shadow').read())"])
    assert res.exit_code != 0 and b"Permission denied" in res.stderr


def test_writing_outside_the_work_dir(sandbox, tmp_path):
    target = tmp_path / "planted.txt"
    os.chmod(tmp_path, 0o777)
    res = py(sandbox, f"open({str(target)!r}, 'w').write('x')\n")
    assert res.exit_code != 0 and not target.exists()
    res = py(sandbox, "open('/usr/planted', 'w').write('x')")
    assert res.exit_code != 0 and not os.path.exists("/usr/planted")
    healthy(sandbox)


def test_tmp_is_private(bwrap):
    marker = f"cascade-marker-{os.getpid()}"
    res = py(bwrap, f"open('/tmp/{marker}', 'w').write('x'); print('ok')")
    assert res.ok and not os.path.exists(f"/tmp/{marker}")


def test_signalling_the_parent(sandbox):
    res = py(
        sandbox,
        "import os, signal\nfor pid in (os.getppid(), 1):\n"
        "    try: os.kill(pid, signal.SIGKILL)\n    except OSError as e: print(e)\n"
        "try: os.kill(-1, signal.SIGKILL)\nexcept OSError as e: print(e)\nprint('alive')",
    )
    assert res.killed_by != "sandbox" and b"alive" in res.stdout
    healthy(sandbox)


def test_signalling_the_host_process_is_impossible(sandbox):
    res = py(sandbox, f"import os\nos.kill({os.getpid()}, 9)")
    assert res.exit_code != 0  # another PID namespace (or another uid): no such process / not permitted
    healthy(sandbox)


def test_no_zombies_or_background_processes_survive_a_command(sandbox):
    async def go():
        async with await sandbox.asession() as s:
            start = time.monotonic()
            res = await s.arun(["sh", "-c", "sleep 100 & sleep 100 & echo started"], timeout_s=3)
            assert res.ok and res.stdout == b"started\n" and time.monotonic() - start < 2
            daemon = (
                "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                "        time.sleep(100)\n    os._exit(0)\nprint('parent done')"
            )
            await s.awrite({"d.py": daemon})
            res = await s.arun([PY, "d.py"])
            assert res.ok and res.stdout == b"parent done\n"
            listing = await s.arun(
                [PY, "-c", "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"]
            )
            return listing.stdout

    import asyncio

    pids = eval(asyncio.run(go()))
    assert len(pids) == 2, pids  # the agent (PID 1) and the listing command itself


def test_huge_output(sandbox):
    res = py(sandbox, "import sys\nwhile True: sys.stdout.write('x' * 65536)", timeout_s=3)
    assert res.killed_by == "output_limit" and res.truncated and len(res.stdout) == 1 << 20
    res = py(sandbox, "import sys\nwhile True: sys.stderr.write('x' * 65536)", timeout_s=3)
    assert res.killed_by == "output_limit" and len(res.stderr) == 1 << 20
    healthy(sandbox)


def test_binary_output(sandbox):
    res = py(sandbox, "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 3)")
    assert res.ok and res.stdout == bytes(range(256)) * 3
    assert "\ufffd" in res.text  # decodes with replacement characters, never raises
