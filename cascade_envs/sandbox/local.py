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
to reach host processes, and System V objects are removed after each command. Workspace mode:
the work dir is a fresh host temp dir (``cascade-workspace-*``) standing for ``workspace.workdir``,
removed with the session; a workspace root, image or mounts are refused. Without namespaces
(logged once) it is rlimits only: a command can open connections, leave daemons and signal the
agent (the host then blames the command, ``killed_by="agent_killed"``). Use ``bwrap`` or
``docker`` for untrusted code.
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
    prefix: tuple[str, ...] = (exe, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child", "--ipc")
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
        """A host temp dir stands for ``workspace.workdir`` (``Session.workdir`` names it); no root, image or mounts."""
        if workspace.root or workspace.mounts or workspace.image:
            raise SandboxError("the local sandbox cannot serve a workspace root, image or mounts (use bwrap or docker)")
        return self._launch(network, dir_prefix="cascade-workspace-")

    def _launch(self, network: bool, dir_prefix: str = "cascade-sandbox-") -> Launch:
        workdir = tempfile.mkdtemp(prefix=dir_prefix)
        if self.run_as is not None:
            os.chown(workdir, self.run_as, self.run_as)
        os.chmod(workdir, 0o700)
        prefix = _unshare_prefix(self.run_as, network)
        # In its namespaces the agent is root of the user namespace: it drops every capability before
        # serving, so neither it nor what it runs can ptrace it, read its pipes, mount or raise limits.
        options = ["dropcaps,ipc"] if prefix else []
        argv = [*prefix, self.python, "-I", "-S", "-c", agent_source(), workdir, *options]
        return Launch(argv, workdir, user=self.run_as, cleanup=[workdir], agent_protected=bool(prefix))

    @property
    def namespaces(self) -> bool:
        """Whether sessions get their own user/PID/network namespaces on this machine."""
        return bool(_unshare_prefix(self.run_as, False))
