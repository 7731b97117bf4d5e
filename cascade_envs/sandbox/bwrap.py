"""The ``bwrap`` backend (bubblewrap): the default wherever it works.

Each session is a fresh set of namespaces (user, PID, network, IPC, UTS, mount) whose root holds only
``/usr`` (read-only), a private ``/proc`` and a read-only ``/dev``. The root itself is read-only: the
only writable places are three size-capped tmpfs mounts, the work dir (``/sandbox``), ``/tmp`` and
``/dev/shm``. Their caps derive from the sandbox's ``memory_mb`` (half, a quarter and a quarter of it,
so a session's files can pin at most ``memory_mb`` of host RAM) unless ``workdir_mb``, ``tmp_mb`` and
``shm_mb`` are given; on top of the caps, what one command writes there (and puts in System V
shared memory) counts against that command's ``memory_mb`` (see ``agent.py``). The host's home,
``/etc`` and everything else are simply absent. The agent is PID 1, so a command's leftovers are
killed after it, nothing it runs can signal it, and everything dies with the session.

Workspace mode (``workspace.py``): the work dir is a RAM disk of ``workspace.workdir_mb`` at
``workspace.workdir`` (e.g. ``/testbed``), the root is ``workspace.root`` (read-only) or ``/usr``
as above, and ``workspace.mounts`` are added; each of ``workspace.hidden`` that one of those
binds would show is covered by an empty read-only tmpfs; the rest is the same.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from .base import Launch, Sandbox, agent_source, as_user
from .workspace import Workspace

WORKDIR = "/sandbox"
NAMESPACES = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--disable-userns",
    "--as-pid-1",
    "--die-with-parent",
    "--new-session",
)
NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl", "/etc/ca-certificates")


def _root_args(exe: str) -> list[str]:
    """``/usr`` read-only, plus the top-level links (or dirs) into it that programs expect."""
    argv = [exe, "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "sbin"):
        path = "/" + name
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return argv


_WORKS: set[tuple[str, int | None]] = set()


def _probe(uid: int | None) -> str | None:
    """Why bwrap cannot run here; a success is remembered, a failure (maybe transient) is not."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap is not installed"
    if (exe, uid) in _WORKS:
        return None
    reason = _probe_exe(exe, uid)
    if reason is None:
        _WORKS.add((exe, uid))
    return reason


def _probe_exe(exe: str, uid: int | None) -> str | None:
    # every option the sessions use: an older bubblewrap that lacks one fails here, not at every session
    argv = [
        *_root_args(exe),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        "1048576",
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        *NAMESPACES,
        "--unshare-net",
        "/usr/bin/true",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, **as_user(uid))
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap cannot run: {exc}"
    if done.returncode:
        return (
            f"bwrap cannot create namespaces here: {' '.join(done.stderr.decode(errors='replace').split())}"
        )
    return None


class BwrapSandbox(Sandbox):
    """Bubblewrap sandboxes; ``ro_binds`` adds host paths (read-only) at the same place inside.

    ``workdir_mb``, ``tmp_mb``, ``shm_mb``: the caps of the work dir, ``/tmp`` and ``/dev/shm``
    (default: half, a quarter and a quarter of ``memory_mb``).
    """

    name = "bwrap"

    def __init__(
        self,
        *,
        ro_binds: tuple[str, ...] = (),
        workdir_mb: int | None = None,
        tmp_mb: int | None = None,
        shm_mb: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.ro_binds = tuple(ro_binds)
        memory = int(self.defaults["memory_mb"])
        self.workdir_mb = int(workdir_mb or max(16, memory // 2))
        self.tmp_mb = int(tmp_mb or max(8, memory // 4))
        self.shm_mb = int(shm_mb or max(8, memory // 4))
        if not self.python.startswith("/usr/"):
            self.ro_binds += (os.path.dirname(os.path.dirname(os.path.realpath(self.python))),)

    @classmethod
    def unavailable(cls) -> str | None:
        return _probe(65534 if os.geteuid() == 0 else None)

    def _launch(self, network: bool) -> Launch:
        return self._launch_in(
            network, _root_args(shutil.which("bwrap") or "bwrap"), WORKDIR, self.workdir_mb
        )

    def _launch_workspace(self, network: bool, workspace: Workspace) -> Launch:
        """``workspace.root`` (or ``/usr``) read-only, its mounts, and a RAM disk of ``workdir_mb`` at its workdir."""
        exe = shutil.which("bwrap") or "bwrap"
        argv = [exe, "--ro-bind", workspace.root, "/"] if workspace.root else _root_args(exe)
        for mount in workspace.mounts:
            argv += ["--bind" if mount.writable else "--ro-bind", mount.source, mount.target]
        return self._launch_in(network, argv, workspace.workdir, workspace.workdir_mb, workspace.hidden)

    def _launch_in(
        self, network: bool, argv: list[str], workdir: str, workdir_mb: int, hidden: tuple[str, ...] = ()
    ) -> Launch:
        binds = self.ro_binds + (tuple(p for p in NETWORK_FILES if os.path.exists(p)) if network else ())
        for path in binds:
            argv += ["--ro-bind", path, path]
        for path in _shown(argv, hidden):
            argv += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]
        argv += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(self.shm_mb << 20),
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            "--size",
            str(self.tmp_mb << 20),
            "--tmpfs",
            "/tmp",
            "--size",
            str(workdir_mb << 20),
            "--tmpfs",
            workdir,
            "--remount-ro",
            "/",
            "--chdir",
            workdir,
            *NAMESPACES,
            *([] if network else ["--unshare-net"]),
            "--hostname",
            "sandbox",
            self.python,
            "-I",
            "-S",
            "-c",
            agent_source(),
            workdir,
            f"account={workdir}:/tmp:/dev/shm,ipc",
        ]
        return Launch(argv, workdir, user=self.run_as, agent_protected=True)


def _shown(argv: list[str], hidden: tuple[str, ...]) -> list[str]:
    """Where each ``hidden`` host directory appears inside, given the binds in ``argv`` (not shown: left out)."""
    binds = [(argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv) if arg in ("--ro-bind", "--bind")]
    shown = []
    for path in (os.path.realpath(p) for p in hidden):
        for source, target in binds:
            source = os.path.realpath(source)
            if os.path.isdir(path) and (path + "/").startswith(source.rstrip("/") + "/"):
                shown.append(os.path.normpath(target + "/" + path[len(source) :]))
    return shown


if sys.platform != "linux":  # pragma: no cover
    BwrapSandbox.unavailable = classmethod(lambda cls: "bubblewrap needs Linux")  # type: ignore[method-assign]
