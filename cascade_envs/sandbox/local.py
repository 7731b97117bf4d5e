"""The ``local`` backend: rlimits, a private temp dir and, where the kernel allows, namespaces.

Commands run as an unprivileged uid (when started as root) in a private work dir under the host's
temp dir, inside ``unshare`` user, PID and network namespaces when unprivileged namespaces are
available (the agent is then PID 1 and kills leftovers after every command). Unlike ``bwrap`` the
host file system stays visible (read-only to an unprivileged uid only where file modes say so):
use ``bwrap`` or ``docker`` for untrusted code in production.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from functools import cache

from .base import Launch, Sandbox, agent_source

log = logging.getLogger("cascade_envs.sandbox")


@cache
def _unshare_prefix(uid: int | None, network: bool) -> tuple[str, ...]:
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    prefix = (exe, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child")
    if not network:
        prefix += ("--net",)
    try:
        kwargs = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, **kwargs)
    except (OSError, subprocess.SubprocessError):
        return ()
    if done.returncode:
        log.warning("local sandbox: namespaces unavailable (%s); using rlimits only", done.stderr.decode().strip())
        return ()
    return prefix


class LocalSandbox(Sandbox):
    """Process-level isolation for machines without bubblewrap."""

    name = "local"

    def _launch(self, network: bool) -> Launch:
        workdir = tempfile.mkdtemp(prefix="cascade-sandbox-")
        if self.run_as is not None:
            os.chown(workdir, self.run_as, self.run_as)
        os.chmod(workdir, 0o700)
        prefix = _unshare_prefix(self.run_as, network)
        argv = [*prefix, self.python, "-I", "-S", "-c", agent_source(), workdir]
        return Launch(argv, workdir, user=self.run_as, cleanup=[workdir])

    @property
    def namespaces(self) -> bool:
        """Whether sessions get their own user/PID/network namespaces on this machine."""
        return bool(_unshare_prefix(self.run_as, False))
