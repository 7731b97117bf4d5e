"""Programs that run inside a SWE episode's sandbox, passed to ``python3 -I -c`` as source text.

They are not imported by the package: ``source(name)`` reads one (``collect``), ``program()`` builds
the test runner's from its parts (``RUNNER``, in order: each part's relative imports are the names
the parts before it defined), compiled under ``<cascade-runner>`` in a namespace of its own, out of
``sys.modules``. Each uses the standard library only and keeps to Python 3.6 syntax, since a task's
image may carry an old interpreter.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from .kernel import RUNNER_NAME

RUNNER = ("supervisor", "kernel", "hook", "guard", "drivers", "runner")
"""The test runner's parts, each using only the ones before it (``kernel`` imports ``hook`` lazily)."""


@cache
def source(name: str) -> str:
    """The text of the script ``name`` (``collect``, or one of ``RUNNER``)."""
    return Path(__file__).with_name(f"{name}.py").read_text(encoding="utf-8")


def _without_relative_imports(text: str) -> str:
    kept, skipping = [], False
    for line in text.splitlines(keepends=True):
        if skipping:
            skipping = ")" not in line
        elif line.lstrip().startswith("from ."):
            skipping = "(" in line and ")" not in line
        else:
            kept.append(line)
    return "".join(kept)


@cache
def program() -> str:
    """The text to pass to ``python3 -c``: the runner's parts in one namespace."""
    text = "\n\n".join(_without_relative_imports(source(name)) for name in RUNNER)
    return (
        f"exec(compile({text!r}, {RUNNER_NAME!r}, 'exec'), "
        "{'__name__': 'cascade_runner', '__builtins__': __builtins__})\n"
    )
