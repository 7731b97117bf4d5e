"""The ``local`` backend: rlimits, a private work dir and, where the kernel allows, namespaces.

Never chosen by default: it must be named (``get_sandbox("local")``, ``CodeEnv(sandbox="local")``),
because it cannot keep the default's promise. The host file system stays visible: a command reads
whatever its uid may read and writes wherever its uid may write (host ``/tmp``, ``/var/tmp``,
``/dev/shm``), and its work dir is a directory on the host's disk, bounded per file (``file_mb``),
not in total.

What it does guarantee: commands run as an unprivileged uid when started as root; where
unprivileged user namespaces work, the agent runs in its own user, PID, network (unless asked),
IPC and mount namespaces with every capability dropped, so it is PID 1 (leftover processes are
killed after each command; nothing a command does can signal it), there is no network and no way
to reach host processes, and System V objects are removed after each command. Without namespaces
(logged once) it is rlimits only: a command can open connections, leave daemons and signal the
agent (the host then blames the command, ``killed_by="agent_killed"``). Use ``bwrap`` or
``docker`` for untrusted code.

Workspace mode needs the namespaces (refused without them) and gives each session a private tree
in its own mount namespace: every host mount is remounted read-only there, the work dir is a
size-capped tmpfs (``workspace.workdir_mb``) at the path of a fresh host temp dir
(``cascade-workspace-*``, which stands for ``workspace.workdir``: ``Session.workdir`` names it),
``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/run/lock`` are private size-capped tmpfs mounts, and
``workspace.hidden`` directories are covered by empty read-only ones. So sibling sessions cannot
see or touch each other's files, nothing is left in the host's temp dirs, the work dir has a
total cap, and what it writes counts against ``memory_mb``; host files stay readable where the
uid may read them (hide what must not be read). A workspace root, image or mounts are refused.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile

from .base import Launch, Sandbox, agent_source, as_user
from .results import SandboxError
from .workspace import Workspace

log = logging.getLogger("cascade_envs.sandbox")

PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
"""Host directories any uid may write: each workspace session gets a private tmpfs in their place."""
# $1: work dir cap (MB), $2: temp dirs cap (MB), $3: the work dir, then hidden dirs up to "--", then the agent's argv
PRIVATE_TREE = r"""set -e
work_mb=$1 tmp_mb=$2 work=$3; shift 3
awk '{print $5}' /proc/self/mountinfo | sort -ru | while read -r m; do
  m=$(printf '%b' "$m"); mount -o remount,bind,ro "$m" 2>/dev/null || [ ! -w "$m" ] || { echo "cannot make $m read-only" >&2; exit 1; }
done
for d in PRIVATE_DIRS; do [ ! -d "$d" ] || mount -t tmpfs -o "size=${tmp_mb}m,mode=1777" tmpfs "$d"; done
mkdir -p "$work" && mount -t tmpfs -o "size=${work_mb}m,mode=700" tmpfs "$work"
while [ "$1" != -- ]; do [ ! -d "$1" ] || mount -t tmpfs -o size=4k,mode=555,ro tmpfs "$1"; shift; done
shift
exec "$@"
""".replace("PRIVATE_DIRS", " ".join(PRIVATE_DIRS))


_PREFIXES: dict[tuple[int | None, bool], tuple[str, ...]] = {}
_warned: list[bool] = []


def _unshare_prefix(uid: int | None, network: bool) -> tuple[str, ...]:
    """The ``unshare`` command line for a session, or ``()`` where namespaces do not work.

    Once namespaces have worked they are always used (a later failure fails that session's start
    instead of quietly running it without them); a failure is not remembered, so a transient one
    (e.g. the uid briefly out of processes) does not downgrade every later session.
    """
    if (uid, network) in _PREFIXES:
        return _PREFIXES[uid, network]
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    prefix: tuple[str, ...] = (
        exe,
        "--user",
        "--map-root-user",
        "--pid",
        "--fork",
        "--mount-proc",
        "--kill-child",
        "--ipc",
    )
    if not network:
        prefix += ("--net",)
    try:
        done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, **as_user(uid))
        why = " ".join(done.stderr.decode(errors="replace").split()) if done.returncode else None
    except (OSError, subprocess.SubprocessError) as exc:
        why = str(exc)
    if why is None:
        _PREFIXES[uid, network] = prefix
        return prefix
    if not _warned:
        _warned.append(True)
        log.warning("local sandbox: namespaces unavailable (%s); using rlimits only", why)
    return ()


class LocalSandbox(Sandbox):
    """Process-level isolation for machines without bubblewrap (only when named: see the module doc)."""

    name = "local"
    caveat = "weaker than bwrap: the host file system is readable and writable where its uid allows"

    def _launch_workspace(self, network: bool, workspace: Workspace) -> Launch:
        """A private tree (module docstring) whose tmpfs work dir stands for ``workspace.workdir``."""
        if workspace.root or workspace.mounts or workspace.image:
            raise SandboxError(
                "the local sandbox cannot serve a workspace root, image or mounts (use bwrap or docker)"
            )
        if not self.namespaces:
            raise SandboxError(
                "the local sandbox cannot give a workspace a private tree here (no user namespaces): "
                "use bwrap or docker"
            )
        return self._launch(network, "cascade-workspace-", workspace)

    def _launch(
        self, network: bool, dir_prefix: str = "cascade-sandbox-", workspace: Workspace | None = None
    ) -> Launch:
        workdir = tempfile.mkdtemp(prefix=dir_prefix)
        if self.run_as is not None:
            os.chown(workdir, self.run_as, self.run_as)
        os.chmod(workdir, 0o700)
        prefix = _unshare_prefix(self.run_as, network)
        # In its namespaces the agent is root of the user namespace: it drops every capability before
        # serving, so neither it nor what it runs can ptrace it, read its pipes, mount or raise limits.
        options = ["dropcaps,ipc"] if prefix else []
        if workspace is not None:
            tmp_mb = max(8, int(self.defaults["memory_mb"]) // 4)
            prefix = (
                *prefix,
                "sh",
                "-c",
                PRIVATE_TREE,
                "sh",
                str(workspace.workdir_mb),
                str(tmp_mb),
                workdir,
                *workspace.hidden,
                "--",
            )
            options = [f"dropcaps,ipc,account={':'.join((workdir, *PRIVATE_DIRS))}"]
        argv = [*prefix, self.python, "-I", "-S", "-c", agent_source(), workdir, *options]
        return Launch(argv, workdir, user=self.run_as, cleanup=[workdir], agent_protected=bool(prefix))

    @property
    def namespaces(self) -> bool:
        """Whether sessions get their own user/PID/network namespaces on this machine."""
        return bool(_unshare_prefix(self.run_as, False))
