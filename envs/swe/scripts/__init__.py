"""Programs that run inside a SWE episode's sandbox, passed to ``python3 -I -c`` as source text.

They are not imported by the package: ``source(name)`` reads one, ``program("runner")`` builds the
test runner's (``kernel.py`` then ``runner.py``, compiled under ``<cascade-runner>`` in a namespace
of its own, out of ``sys.modules``). Each uses the standard library only and keeps to Python 3.6
syntax, since a task's image may carry an old interpreter.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from .kernel import RUNNER_NAME

IMPORT_OF_KERNEL = "from .kernel import "
"""The line of ``runner.py`` that, in the program, the prepended kernel stands for."""


@cache
def source(name: str) -> str:
    """The text of the script ``name`` (``collect``, ``kernel`` or ``runner``)."""
    return Path(__file__).with_name(f"{name}.py").read_text(encoding="utf-8")


@cache
def program(name: str = "runner") -> str:
    """The text to pass to ``python3 -c``: the runner, with the kernel it imports prepended."""
    runner = "".join(
        line for line in source(name).splitlines(keepends=True) if not line.startswith(IMPORT_OF_KERNEL)
    )
    text = source("kernel") + "\n\n" + runner
    return (
        f"exec(compile({text!r}, {RUNNER_NAME!r}, 'exec'), "
        "{'__name__': 'cascade_runner', '__builtins__': __builtins__})\n"
    )
