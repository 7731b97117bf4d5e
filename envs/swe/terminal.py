"""The terminal tool's commands, run in the episode's sandbox workspace.

OpenHands keeps one interactive shell per conversation (tmux). Here each command is a fresh
``bash`` in the sandbox that starts where the previous one ended: its working directory and
exported variables are carried over (``Shell``), so ``cd`` and ``export`` persist as the tool's
description promises, while nothing else does: a command runs to completion (or its timeout),
and every process it leaves is killed after it (the sandbox agent is PID 1). Hence no
``is_input``: there is never a running process to send input to. stdout and stderr are merged
as a terminal shows them; the carried state travels on a side channel (fd 3 → stderr), so
nothing is written to the workspace or a shared ``/tmp``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cascade_envs.sandbox import Session

MAX_COMMAND_CHARS = 100_000
STATE_SEP = "\0"
# $1: the command, $2: the directory to start in, $3: the workspace root; stdin: the exported variables
SCRIPT = r"""exec 3>&2 2>&1
eval "$(cat)" 2>/dev/null
exec </dev/null
cd -- "$2" 2>/dev/null || cd -- "$3"
trap '{ printf "%s\0" "$PWD"; export -p; } >&3 2>/dev/null' EXIT
eval "$1"
"""


@dataclass
class Outcome:
    """What one command did, for the observation."""

    output: str
    exit_code: int
    cwd: str
    timed_out: bool = False
    note: str = ""


@dataclass
class Shell:
    """The terminal state carried between commands: working directory and exported variables."""

    root: str
    cwd: str = ""
    exports: str = ""

    def reset(self) -> None:
        self.cwd, self.exports = self.root, ""

    async def run(self, session: Session, command: str, timeout_s: float) -> Outcome:
        """Run ``command`` in ``session`` from the carried state; update the state from how it ended."""
        result = await session.arun(
            ["bash", "-c", SCRIPT, "bash", command, self.cwd or self.root, self.root],
            self.exports,
            timeout_s=timeout_s,
        )
        output = result.stdout.decode("utf-8", errors="replace")
        state = result.stderr.decode("utf-8", errors="replace")
        cwd, sep, exports = state.partition(STATE_SEP)
        if sep and cwd.startswith("/") and not result.truncated:
            self.cwd, self.exports = cwd, exports
        note = ""
        if result.killed_by == "timeout":
            note = f"The command timed out after {timeout_s:g} seconds and was stopped (with everything it started)."
        elif result.killed_by == "output_limit":
            note = "The command produced too much output and was stopped; its output is cut."
        elif result.killed_by:
            note = f"The command was stopped: {result.describe()}."
        return Outcome(output, result.exit_code, self.cwd or self.root, result.killed_by == "timeout", note)
