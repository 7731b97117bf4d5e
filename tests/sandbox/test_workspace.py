"""Workspace mode: a repository at its own path per session, limits and containment, nothing left behind."""

from __future__ import annotations

import asyncio
import glob
import os
import tempfile
import time

import pytest

from cascade_envs.sandbox import Mount, SandboxError, Workspace, get_sandbox
from tests import docker_support

from .conftest import backend_or_skip, host_pids_of, unique_marker

pytestmark = pytest.mark.xdist_group("host-shared-memory")

LIMITS = {"timeout_s": 3, "memory_mb": 256, "output_limit_mb": 1, "file_mb": 8, "nproc": 32}


def readable(path):
    """Open ``path`` and its parents to the sandbox's unprivileged uid (pytest's temp dirs are private)."""
    for part in (path, *path.parents):
        if str(part).startswith(tempfile.gettempdir() + "/"):
            os.chmod(part, os.stat(part).st_mode | 0o755)
    return path


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("VALUE = 41\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (tmp_path / "run.sh").chmod(0o755)
    return tmp_path


@pytest.fixture(params=("bwrap", "local", "docker"))
def sandbox(request):
    return backend_or_skip(request.param, **LIMITS)


def run(coro):
    return asyncio.run(coro)


def test_source_is_copied_to_the_workdir_and_commands_run_there(sandbox, repo):
    async def go():
        async with await sandbox.asession(workspace=Workspace(source=str(repo))) as s:
            where = await s.arun(
                [
                    "bash",
                    "-c",
                    "pwd; echo $HOME; ./run.sh; python3 -c 'import pkg.mod as m; print(m.VALUE + 1)'",
                ]
            )
            await s.awrite({"pkg/new.py": "X = 1\n"})
            edited = await s.arun(
                ["bash", "-c", "echo 'VALUE = 1' > pkg/mod.py && cat pkg/mod.py pkg/new.py"]
            )
            return s.workdir, where, edited

    workdir, where, edited = run(go())
    assert where.ok, where
    assert where.text.split("\n")[:4] == [workdir, workdir, "ran", "42"]
    assert edited.text == "VALUE = 1\nX = 1\n"
    if sandbox.name in ("bwrap", "docker"):
        assert workdir == "/testbed"
    assert repo.joinpath("pkg", "mod.py").read_text() == "VALUE = 41\n"  # the host's copy is untouched


def test_bwrap_root_mounts_and_read_only_system(repo, tmp_path_factory):
    sandbox = backend_or_skip("bwrap", **LIMITS)
    shared = readable(tmp_path_factory.mktemp("shared"))
    (shared / "data.txt").write_text("shared data\n")
    out = readable(tmp_path_factory.mktemp("out"))
    os.chmod(out, 0o777)
    workspace = Workspace(
        workdir="/work/repo",
        source=str(repo),
        mounts=(Mount(str(shared), "/data"), Mount(str(out), "/out", writable=True)),
    )

    async def go():
        async with await sandbox.asession(workspace=workspace) as s:
            return await s.arun(
                [
                    "bash",
                    "-c",
                    "pwd; cat /data/data.txt; echo hi > /out/o.txt; "
                    "echo x > /data/y 2>/dev/null || echo ro-data; touch /usr/x 2>/dev/null || echo ro-usr; "
                    "ls /root /home /etc 2>/dev/null | wc -l",
                ]
            )

    result = run(go())
    assert result.text.split("\n")[:5] == ["/work/repo", "shared data", "ro-data", "ro-usr", "0"], result
    assert (out / "o.txt").read_text() == "hi\n"
    assert not (shared / "y").exists()


def test_workspace_root_is_served_read_only_as_slash(tmp_path):
    sandbox = backend_or_skip("bwrap", **LIMITS)

    async def go():
        async with await sandbox.asession(workspace=Workspace(root="/", workdir="/srv")) as s:
            return await s.arun(
                [
                    "bash",
                    "-c",
                    "pwd; test -f /etc/os-release && echo root-seen; echo x > /x 2>/dev/null || echo ro",
                ]
            )

    assert run(go()).text.split("\n")[:3] == ["/srv", "root-seen", "ro"]


def test_network_is_off_unless_asked(sandbox, repo):
    async def go():
        async with await sandbox.asession(workspace=Workspace(source=str(repo))) as s:
            return await s.arun(
                ["python3", "-c", "import socket; socket.create_connection(('1.1.1.1', 53), timeout=1)"]
            )

    assert run(go()).exit_code != 0


def test_timeout_output_flood_and_fork_bomb_are_bounded(sandbox, repo):
    marker = unique_marker()

    async def go():
        async with await sandbox.asession(workspace=Workspace(source=str(repo))) as s:
            start = time.monotonic()
            hang = await s.arun(["bash", "-c", "sleep 100"], timeout_s=1)
            flood = await s.arun(["bash", "-c", "yes flood"])
            bomb = await s.arun(["bash", "-c", "b() { b | b & }; b; sleep 5", marker], timeout_s=2)
            after = await s.arun(["bash", "-c", "cat pkg/mod.py"])
            return time.monotonic() - start, hang, flood, bomb, after

    elapsed, hang, flood, bomb, after = run(go())
    assert hang.killed_by == "timeout"
    assert flood.killed_by == "output_limit" and flood.truncated and len(flood.stdout) <= 1 << 20
    assert bomb.killed_by == "timeout"
    assert after.ok and after.text == "VALUE = 41\n"
    assert elapsed < 20
    if sandbox.run_as is not None:
        time.sleep(0.2)
        assert host_pids_of(sandbox.run_as, "bash", marker) == []


def test_rm_rf_slash_is_contained_to_the_workspace(sandbox, repo):
    # local too: a local workspace sees the host read-only, with private temp dirs (sandbox/local.py)
    fd, marker = tempfile.mkstemp()
    os.close(fd)
    os.chmod(marker, 0o666)

    async def go():
        async with await sandbox.asession(workspace=Workspace(source=str(repo))) as s:
            wiped = await s.arun(
                ["bash", "-c", "rm -rf --no-preserve-root / 2>/dev/null; ls -A /testbed | wc -l"],
                timeout_s=180,  # local: rm walks the whole (read-only) host tree, slow on a big busy host
            )
            alive = await s.arun(["python3", "-c", "print('alive')"])
            return wiped, alive

    try:
        wiped, alive = run(go())
        assert wiped.text.strip() == "0"  # its own workspace is gone ...
        assert alive.text == "alive\n"  # ... the system it runs on is not
        assert os.path.exists(marker) and repo.joinpath("pkg", "mod.py").exists()
    finally:
        os.unlink(marker)


def test_file_transfers_refuse_symlinks_and_special_files_promptly(sandbox, repo):
    """The agent's own reads and writes never follow a link (in any component) nor block on a FIFO."""

    async def go():
        async with await sandbox.asession(workspace=Workspace(source=str(repo))) as s:
            made = await s.arun(
                [
                    "bash",
                    "-c",
                    "mkfifo fifo && ln -s /etc/hostname link && ln -s /tmp dirlink && ln -s pkg/mod.py inner",
                ]
            )
            assert made.ok, made
            start, errors = time.monotonic(), []
            for op in (
                lambda: s.aread("fifo"),
                lambda: s.awrite({"fifo": "x"}),
                lambda: s.aread("link"),
                lambda: s.awrite({"link": "x"}),
                lambda: s.awrite({"dirlink/x": "x"}),
                lambda: s.aread("inner"),
            ):
                with pytest.raises(SandboxError, match="agent error") as caught:
                    await op()
                errors.append(str(caught.value))
            await s.awrite({"new/deep/file.txt": "ok"})
            return time.monotonic() - start, errors, await s.aread("new/deep/file.txt"), s.lost

    elapsed, errors, data, lost = run(go())
    assert all("not a regular file" in e or "not a directory" in e for e in errors), errors
    assert data == b"ok" and lost is None and elapsed < 10


def test_local_workspaces_are_private_trees(repo, tmp_path):
    """Siblings cannot see or touch each other; nothing reaches the host's temp dirs; hidden dirs are empty; capped."""
    local = backend_or_skip("local", **LIMITS)
    secret = tmp_path / "rows"
    secret.mkdir()
    (secret / "tasks.jsonl").write_text('{"patch": "the gold patch"}\n')
    marker = unique_marker()
    spec = Workspace(source=str(repo), hidden=(str(secret),), workdir_mb=4)

    async def go():
        async with (
            await local.asession(workspace=spec) as first,
            await local.asession(workspace=spec) as second,
        ):
            plant = await first.arun(
                [
                    "bash",
                    "-c",
                    f"echo {marker} > mine; for d in /tmp /var/tmp /dev/shm /run/lock; do "
                    f"echo {marker} > $d/{marker} || exit 1; done",
                ]
            )
            peek = await second.arun(
                [
                    "bash",
                    "-c",
                    f"cat {first.workdir}/mine; ls /tmp /var/tmp /dev/shm /run/lock; "
                    f"ls -A {secret}; cat {secret}/tasks.jsonl; touch {repo}/x",
                ]
            )
            fill = await first.arun(["bash", "-c", "head -c 8000000 /dev/zero > big"])
            return plant, peek, fill

    plant, peek, fill = run(go())
    assert plant.ok, plant
    assert marker not in peek.text and "gold patch" not in peek.text and not (repo / "x").exists(), peek
    assert "No space left" in fill.text + fill.stderr.decode(), fill
    for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
        assert not os.path.exists(os.path.join(folder, marker))


def test_workspace_cap_and_bad_sources(tmp_path):
    sandbox = backend_or_skip("bwrap", **LIMITS)
    big = tmp_path / "big"
    big.mkdir()
    (big / "blob.bin").write_bytes(b"x" * (2 << 20))
    with pytest.raises(SandboxError, match="larger than the workdir cap of 1 MB"):
        run(sandbox.asession(workspace=Workspace(source=str(big), workdir_mb=1)))
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "link").symlink_to("/etc/passwd")
    with pytest.raises(SandboxError, match="not a regular file"):
        run(sandbox.asession(workspace=Workspace(source=str(linked))))
    with pytest.raises(ValueError, match="absolute path of its own"):
        Workspace(workdir="relative")
    with pytest.raises(ValueError, match="absolute path of its own"):
        Workspace(workdir="/")
    with pytest.raises(ValueError, match="does not exist"):
        Mount("/no/such/dir", "/x")


def test_backends_without_a_workspace_mode_refuse(repo):
    local = backend_or_skip("local", **LIMITS)
    with pytest.raises(SandboxError, match="cannot serve a workspace root, image or mounts"):
        run(local.asession(workspace=Workspace(source=str(repo), mounts=(Mount(str(repo), "/x"),))))
    unsafe = get_sandbox("unsafe-subprocess", **LIMITS)
    with pytest.raises(SandboxError, match="no workspace mode"):
        run(unsafe.asession(workspace=Workspace(source=str(repo))))


def test_nothing_is_left_behind(sandbox, repo, private_tempdir):
    marker = unique_marker()
    if sandbox.name == "docker":  # this test's own containers, found by a label
        sandbox = backend_or_skip("docker", labels={"cascade-test": marker}, **LIMITS)
        volumes = docker_support.volumes()

    async def go():
        sessions = [await sandbox.asession(workspace=Workspace(source=str(repo))) for _ in range(3)]
        for s in sessions:
            await s.arun(["bash", "-c", f"sleep {marker} & echo started"])
        if sandbox.name == "docker":
            assert len(docker_support.containers(f"cascade-test={marker}")) == 3
        workdirs = [s.workdir for s in sessions]
        await asyncio.gather(*(s.aclose() for s in sessions))
        return workdirs

    workdirs = run(go())
    time.sleep(0.2)
    assert glob.glob(os.path.join(private_tempdir, "cascade-workspace-*")) == []
    if sandbox.name == "local":
        assert not any(os.path.exists(w) for w in workdirs)
    if sandbox.name == "docker":
        assert (
            docker_support.containers(f"cascade-test={marker}") == [] and docker_support.volumes() <= volumes
        )
    if sandbox.run_as is not None:
        assert host_pids_of(sandbox.run_as, "sleep", marker) == []


def test_docker_workspace_starts_with_the_images_tree_in_a_capped_tmpfs(repo):
    """An image's own workdir is copied into the session's tmpfs: edits never reach the image, and are capped."""
    sandbox = backend_or_skip("docker", **LIMITS)
    from cascade_envs.sandbox import images

    client = images.client()
    tree = {
        "pkg/mod.py": (b"VALUE = 41\n", 0o644),
        "run.sh": (b"#!/bin/sh\necho ran\n", 0o755),
        "big.bin": (b"x" * (3 << 20), 0o644),
    }
    image = images.build_tree(
        client, images.SANDBOX_IMAGE, "cascade-test-tree:1", tree, "/opt/repo", key="tree-1"
    )

    async def go():
        async with await sandbox.asession(
            workspace=Workspace(workdir="/opt/repo", image=image, workdir_mb=6)
        ) as s:
            own = await s.arun(
                [
                    "sh",
                    "-c",
                    "pwd; ./run.sh; python3 -c 'import pkg.mod as m; print(m.VALUE + 1)'; "
                    "echo edit > pkg/mod.py && cat pkg/mod.py; touch /opt/x 2>&1 | grep -c Read-only",
                ]
            )
            full = await s.arun(["sh", "-c", "head -c 8000000 /dev/zero > fill; echo $?"], timeout_s=10)
        async with await sandbox.asession(workspace=Workspace(workdir="/opt/repo", image=image)) as s:
            fresh = await s.arun(["cat", "pkg/mod.py"])
        async with await sandbox.asession(workspace=Workspace(source=str(repo), image=image)) as s:
            copied = await s.arun(["sh", "-c", "pwd; python3 -c 'import pkg.mod as m; print(m.VALUE + 1)'"])
        with pytest.raises(SandboxError, match=r"the image's /opt/repo .* work dir \(its cap: 2 MB"):
            await sandbox.asession(workspace=Workspace(workdir="/opt/repo", image=image, workdir_mb=2))
        return own, full, fresh, copied

    own, full, fresh, copied = run(go())
    assert own.text.split("\n")[:5] == ["/opt/repo", "ran", "42", "edit", "1"], own
    assert full.text.strip() == "1" and b"No space left" in full.stderr, (
        full
    )  # 3 MB of tree + 8 MB > the 6 MB cap
    assert fresh.text == "VALUE = 41\n"  # the image is never changed
    assert copied.text.split("\n")[:2] == ["/testbed", "42"], copied
