"""The ``bwrap`` backend (bubblewrap): the default wherever it works.

Each session is a fresh set of namespaces (user, PID, network, IPC, UTS, mount) whose root holds only
``/usr`` (read-only), a private ``/proc`` and ``/dev``, and size-capped tmpfs work and temp dirs.
The host's home, ``/etc`` and everything else are simply absent. The agent is PID 1, so a
command's leftovers are killed after it, and everything dies with the session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import cache

from .base import Launch, Sandbox, agent_source

WORKDIR = "/sandbox"
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


@cache
def _probe(uid: int | None) -> str | None:
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    argv = [*_root_args(exe), "--unshare-all", "--as-pid-1", "--die-with-parent", "/usr/bin/true"]
    try:
        kwargs = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        done = subprocess.run(argv, capture_output=True, timeout=10, **kwargs)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap cannot run: {exc}"
    if done.returncode:
        return f"bwrap cannot create namespaces here: {done.stderr.decode(errors='replace').strip()}"
    return None


class BwrapSandbox(Sandbox):
    """Bubblewrap sandboxes; ``ro_binds`` adds host paths (read-only) at the same place inside."""

    name = "bwrap"

    def __init__(self, *, ro_binds: tuple[str, ...] = (), workdir_mb: int = 256, tmp_mb: int = 64, **kwargs):
        super().__init__(**kwargs)
        self.ro_binds = tuple(ro_binds)
        self.workdir_mb, self.tmp_mb = workdir_mb, tmp_mb
        if not self.python.startswith("/usr/"):
            self.ro_binds += (os.path.dirname(os.path.dirname(os.path.realpath(self.python))),)

    @classmethod
    def unavailable(cls) -> str | None:
        return _probe(65534 if os.geteuid() == 0 else None)

    def _launch(self, network: bool) -> Launch:
        argv = _root_args(shutil.which("bwrap") or "bwrap")
        binds = self.ro_binds + (tuple(p for p in NETWORK_FILES if os.path.exists(p)) if network else ())
        for path in binds:
            argv += ["--ro-bind", path, path]
        argv += [
            "--proc", "/proc", "--dev", "/dev",
            "--size", str(self.tmp_mb << 20), "--tmpfs", "/tmp",
            "--size", str(self.workdir_mb << 20), "--tmpfs", WORKDIR,
            "--chdir", WORKDIR,
            "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            *([] if network else ["--unshare-net"]),
            "--disable-userns", "--as-pid-1", "--die-with-parent", "--new-session",
            "--hostname", "sandbox",
            self.python, "-I", "-S", "-c", agent_source(), WORKDIR,
        ]
        return Launch(argv, WORKDIR, user=self.run_as)


if sys.platform != "linux":  # pragma: no cover
    BwrapSandbox.unavailable = classmethod(lambda cls: "bubblewrap needs Linux")  # type: ignore[method-assign]
