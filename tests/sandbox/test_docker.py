"""The docker backend against a running daemon: bad images, a daemon that goes away, a killed agent,
a full disk, 50 sessions at once, and nothing left behind (containers and volumes listed before and after).

Each test labels its containers with a marker of its own, since other tests run containers at the same time.
Runs wherever a daemon answers (``docker_support``); CI requires it.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from cascade_envs.sandbox import SandboxError, Workspace, images
from cascade_envs.sandbox.docker import DockerSandbox
from tests import docker_support

from .conftest import backend_or_skip, unique_marker

pytestmark = pytest.mark.xdist_group("host-shared-memory")

LIMITS = {"timeout_s": 5, "memory_mb": 256, "output_limit_mb": 1, "file_mb": 64, "nproc": 32}
PY = "/usr/bin/python3"


def labelled(marker: str, **options) -> DockerSandbox:
    """A docker sandbox whose containers carry ``cascade-test=<marker>``."""
    sandbox = backend_or_skip("docker", labels={"cascade-test": marker}, **{**LIMITS, **options})
    assert isinstance(sandbox, DockerSandbox)
    return sandbox


def left(marker: str) -> list:
    return docker_support.containers(f"cascade-test={marker}")


# ----- images: missing, malformed, unusable -------------------------------------------------------


def test_a_missing_image_raises_at_start_naming_how_to_get_it_and_is_never_pulled():
    marker = unique_marker()
    sandbox = labelled(marker, image="cascade-no-such-image:1")
    start = time.monotonic()
    with pytest.raises(
        SandboxError,
        match=r"docker image 'cascade-no-such-image:1' is not here: images are never "
        r"pulled here.*docker pull cascade-no-such-image:1",
    ):
        sandbox.run(["python3", "-c", "print(1 + 1)"])  # never an empty result read as the program's output
    assert time.monotonic() - start < 10 and left(marker) == []
    with pytest.raises(Exception, match=r"No such image|not found"):
        images.client().images.get("cascade-no-such-image:1")  # nothing was pulled
    assert images.build_hint(images.SANDBOX_IMAGE) == "build it with `cascade-envs build-image sandbox`"
    assert images.build_hint(images.SWE_BASE_IMAGE) == "build it with `cascade-envs build-image swe-base`"
    assert "build-image swe --tasks" in images.build_hint("cascade-swe-x:0123456789abcdef")


def test_the_code_env_masks_a_sample_whose_image_is_missing_with_that_reason():
    from cascade_envs.envs.code.env import CodeEnv

    backend_or_skip("docker")
    env = CodeEnv(tasks=[SUM], sandbox=DockerSandbox(image="cascade-no-such-image:1"))
    reward = asyncio.run(env.areward(SUM, "```python\nprint(3)\n```"))
    assert reward.masked and "cascade-no-such-image:1" in reward.error and "docker pull" in reward.error, (
        reward
    )


SUM = {"prompt": "add", "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}}}


@pytest.mark.parametrize(
    "name",
    [
        "img; touch /tmp/cascade-pwned",
        "$(touch /tmp/cascade-pwned)",
        "a b",
        "`id`",
        "--privileged",
        "Upper:1",
        "x:y:z",
        "../etc/passwd",
        "img\nrm -rf /",
    ],
)
def test_image_names_with_shell_metacharacters_are_refused_before_any_call(name):
    backend_or_skip("docker")
    with pytest.raises(SandboxError, match="is not a valid docker image name"):
        DockerSandbox(image=name)
    marker = unique_marker()
    sandbox = labelled(marker)
    with pytest.raises(SandboxError, match="is not a valid docker image name"):
        asyncio.run(sandbox.asession(workspace=Workspace(image=name)))
    assert left(marker) == [] and not os.path.exists("/tmp/cascade-pwned")
    from cascade_envs.core import TaskError
    from cascade_envs.envs.swe.task import read_task

    with pytest.raises(
        TaskError, match="expected a docker image name"
    ) as info:  # a SWE row naming it: a bad row
        read_task({"problem_statement": "x", "FAIL_TO_PASS": ["t"], "docker_image": name})
    assert info.value.field == "docker_image"


def test_an_image_without_python3_is_a_clear_error_with_nothing_left():
    marker = unique_marker()
    sandbox = labelled(marker)
    image = images.build_tree(
        images.client(),
        "scratch",
        "cascade-test-no-python:1",
        {"hello.txt": (b"hi", 0o644)},
        "/data",
        key="no-python-1",
    )
    with pytest.raises(SandboxError, match=r"the image 'cascade-test-no-python:1' has no python3"):
        asyncio.run(sandbox.asession(workspace=Workspace(workdir="/data", image=image)))
    time.sleep(0.5)
    assert left(marker) == []


# ----- the container's limits ---------------------------------------------------------------------

FILL = """import errno, sys
target, written, why = sys.argv[1], 0, "done"
try:
    with open(target, "wb", buffering=0) as fh:
        while written < (400 << 20):
            written += fh.write(b"x" * (1 << 20))
except OSError as exc:
    why = errno.errorcode.get(exc.errno, str(exc.errno))
print(written >> 20, why)
"""


def test_a_full_disk_is_a_plain_error_of_the_program_and_the_container_lives_on():
    """Writes anywhere: the root is read-only, the tmpfs mounts stop at their caps; the host's shared memory
    grows by no more than the caps; the next command runs normally."""
    from tests.sandbox.test_bounds import shmem_mb

    marker = unique_marker()
    sandbox = labelled(
        marker, memory_mb=1024, file_mb=4096, timeout_s=30, workdir_mb=96, tmp_mb=48, shm_mb=32
    )
    before = shmem_mb()

    async def go():
        async with await sandbox.asession(files={"fill.py": FILL}) as s:
            out = {
                t: (await s.arun([PY, "fill.py", t])).text.split()
                for t in (
                    "/fill",
                    "/usr/fill",
                    "/etc/fill",
                    "/var/fill",
                    "/dev/shm/fill",
                    "/tmp/fill",
                    "fill",
                )
            }
            grown = shmem_mb() - before
            return out, grown, await s.arun([PY, "-c", "print(45)"])

    out, grown, after = asyncio.run(go())
    for target in ("/fill", "/usr/fill", "/etc/fill", "/var/fill"):
        assert out[target] == ["0", "EROFS"], (target, out)
    assert out["/dev/shm/fill"] == ["32", "ENOSPC"] and out["/tmp/fill"] == ["48", "ENOSPC"], out
    assert out["fill"][1] == "ENOSPC" and int(out["fill"][0]) <= 96, out
    assert grown < 96 + 48 + 32 + 16, grown
    assert after.ok and after.stdout == b"45\n"
    assert left(marker) == []


def test_running_the_container_out_of_memory_kills_the_program_never_the_agent():
    """Eight processes of 100 MB in a container of 448 MB, under the command's own limit (1 GB): the kernel's
    OOM killer takes the program's processes, never the agent; the session lives on."""
    sandbox = labelled(
        unique_marker(),
        container_memory_mb=448,
        workdir_mb=128,
        tmp_mb=64,
        shm_mb=64,
        timeout_s=20,
        memory_mb=1024,
    )
    forks = (
        "import os, time\nfor _ in range(8):\n    if os.fork() == 0:\n"
        "        block = b'x' * (100 << 20)\n        time.sleep(3)\n        os._exit(0)\n"
        "print(sorted(os.wait()[1] for _ in range(8)))"
    )

    async def go():
        async with await sandbox.asession(files={"forks.py": forks}) as s:
            return await s.arun([PY, "forks.py"]), await s.arun([PY, "-c", "print(45)"])

    hog, after = asyncio.run(go())
    assert hog.killed_by not in ("sandbox", "agent_killed"), hog
    statuses = eval(hog.text) if hog.ok else [9]
    assert 9 in statuses, hog  # some of its processes were OOM-killed (SIGKILL)
    assert after.ok and after.stdout == b"45\n", after


# ----- losses: the agent killed, the host process killed, the daemon stopped ------------------------


def test_a_container_killed_from_outside_is_a_lost_sandbox_and_is_removed():
    marker = unique_marker()
    sandbox = labelled(marker)

    async def go():
        async with await sandbox.asession() as s:
            run = asyncio.create_task(s.arun(["sleep", "4"]))
            await asyncio.sleep(0.5)
            await asyncio.to_thread(s.container.kill)
            return await run

    res = asyncio.run(go())
    assert res.killed_by == "sandbox" and "lost" in res.error, res  # the infrastructure's: a masked sample
    time.sleep(0.5)
    assert left(marker) == []


def test_a_start_cancelled_at_any_point_leaves_no_container():
    """An episode's deadline may cancel a session while its container is being created, started or filled."""
    marker = unique_marker()
    sandbox = labelled(marker)

    async def go():
        for delay in (0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8):
            start = asyncio.create_task(
                sandbox.asession(workspace=Workspace(workdir="/opt", image=images.SANDBOX_IMAGE))
            )
            await asyncio.sleep(delay)
            start.cancel()
            try:
                session = await start
            except asyncio.CancelledError:
                continue
            await session.aclose()  # it had started before the cancel

    asyncio.run(go())
    time.sleep(0.5)
    assert left(marker) == []


def test_a_killed_host_process_leaves_no_container():
    """The process holding sessions dies (SIGKILL): each agent reads EOF, exits, and the daemon removes it."""
    marker = unique_marker()
    labelled(marker)
    code = textwrap.dedent(f"""
        import asyncio, sys
        from cascade_envs.sandbox import get_sandbox
        async def main():
            sb = get_sandbox("docker", labels={{"cascade-test": "{marker}"}})
            sessions = [await sb.asession() for _ in range(3)]
            print("ready", flush=True)
            await sessions[0].arun(["sleep", "8"], timeout_s=60)
        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=os.environ.copy())
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    assert len(left(marker)) == 3
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 60  # the one in a command exits when the command ends (sleep 8)
    while left(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left(marker) == []


def test_fifty_concurrent_sessions_are_torn_down_cleanly():
    marker = unique_marker()
    sandbox = labelled(marker, api_timeout_s=120)
    volumes = docker_support.volumes()

    async def one(i: int) -> bytes:
        async with await sandbox.asession(files={"i.txt": str(i)}) as s:
            return (await s.arun(["cat", "i.txt"])).stdout

    async def go():
        return await asyncio.gather(*(one(i) for i in range(50)))

    start = time.monotonic()
    assert asyncio.run(go()) == [str(i).encode() for i in range(50)]
    elapsed = time.monotonic() - start
    assert left(marker) == [] and docker_support.volumes() <= volumes
    assert elapsed < 240, elapsed
    print(f"50 sessions in {elapsed:.1f} s")


def test_anonymous_volumes_an_image_declares_are_removed_with_its_container():
    marker = unique_marker()
    client = images.client()
    dockerfile = io.BytesIO(f"FROM {images.SANDBOX_IMAGE}\nVOLUME /data\n".encode())
    client.images.build(fileobj=dockerfile, tag="cascade-test-volume:1", rm=True, pull=False)
    sandbox = labelled(marker, image="cascade-test-volume:1")
    before = docker_support.volumes()

    async def go():
        async with await sandbox.asession() as s:
            during = docker_support.volumes() - before
            return during, await s.arun(["sh", "-c", "echo x > /data/x 2>&1; echo $?"])

    during, res = asyncio.run(go())
    assert len(during) == 1 and res.ok
    time.sleep(0.5)
    assert docker_support.volumes() - before == set() and left(marker) == []


@pytest.fixture
def private_daemon():
    backend_or_skip("docker")
    daemon = docker_support.PrivateDaemon(Path(tempfile.mkdtemp(prefix="cd-")))
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.close()


def test_a_daemon_that_stops_mid_command_loses_the_session_and_then_refuses_clearly(private_daemon):
    sandbox = DockerSandbox(base_url=private_daemon.url, **LIMITS)

    async def go():
        async with await sandbox.asession() as s:
            run = asyncio.create_task(s.arun(["sleep", "20"], timeout_s=30))
            await asyncio.sleep(1)
            await asyncio.to_thread(private_daemon.stop)
            return await run

    start = time.monotonic()
    res = asyncio.run(go())
    assert res.killed_by == "sandbox" and "lost" in res.error, res  # the infrastructure's: masked, never a 0
    with pytest.raises(SandboxError, match="did not start"):
        DockerSandbox(base_url=private_daemon.url, **LIMITS).run(["true"])
    assert time.monotonic() - start < 60
    private_daemon.start()  # back again: it removed the container it stopped (--rm)
    assert private_daemon.containers() == []


# ----- cascade-envs build-image ----------------------------------------------------------------------


def test_build_image_keeps_what_is_there_and_builds_swe_instance_images(tmp_path):
    import json

    backend_or_skip("docker")
    docker_support.require("swe-base")
    (tmp_path / "repo" / "calc").mkdir(parents=True)
    (tmp_path / "repo" / "calc" / "__init__.py").write_text("def add(a, b):\n    return a - b\n")
    row = {
        "instance_id": f"cli__calc-{unique_marker().replace('.', '')}",
        "problem_statement": "add subtracts",
        "FAIL_TO_PASS": ["tests.test_calc.T.test_add"],
        "repo_snapshot": str(tmp_path / "repo"),
    }
    tasks = tmp_path / "rows.jsonl"
    tasks.write_text(json.dumps(row) + "\n")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cascade_envs", "build-image", *args],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "CASCADE_ENVS_IMAGE_CACHE": str(docker_support.CACHE)},
        )

    kept = cli("sandbox")
    assert kept.returncode == 0 and kept.stdout.strip() == f"{images.SANDBOX_IMAGE}: present", kept
    first, second = cli("swe", "--tasks", str(tasks)), cli("swe", "--tasks", str(tasks))
    assert first.returncode == 0 and second.returncode == 0, (first, second)
    name = first.stdout.split()[-2].rstrip(":")
    assert name.startswith(images.SWE_IMAGE_PREFIX + "cli-calc-") and first.stdout.endswith(": built\n"), (
        first
    )
    assert second.stdout.endswith(f"{name}: present\n"), second
    assert images.client().images.get(name).labels[images.KEY_LABEL] == name.rpartition(":")[2]
    tasks.write_text(json.dumps({**row, "FAIL_TO_PASS": []}) + "\n")
    bad = cli("swe", "--tasks", str(tasks))
    assert bad.returncode == 2 and "FAIL_TO_PASS" in bad.stderr, bad
    images.client().images.remove(name)
