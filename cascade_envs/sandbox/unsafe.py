"""The ``unsafe-subprocess`` backend: NO isolation, only rlimits and timeouts.

Model code runs as this process's user with full access to the host. It exists for debugging
and for machines where the user has decided the code is trusted; it is never chosen by default
and must be asked for by this exact name.
"""

from __future__ import annotations

import tempfile

from .base import Launch, Sandbox, agent_source


class UnsafeSubprocessSandbox(Sandbox):
    """Runs commands as plain subprocesses in a temp dir (rlimits and timeouts still apply)."""

    name = "unsafe-subprocess"
    isolated = False
    caveat = "NO isolation: model code runs as this process's user with full access to the host"

    def _launch(self, network: bool) -> Launch:
        workdir = tempfile.mkdtemp(prefix="cascade-unsafe-")
        return Launch([self.python, "-I", "-S", "-c", agent_source(), workdir], workdir, cleanup=[workdir])
