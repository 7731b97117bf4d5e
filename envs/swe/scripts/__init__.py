"""Programs that run inside a SWE episode's sandbox, passed to ``python3 -I -c`` as source text.

They are not imported by the package: ``source(name)`` reads one. Each uses the standard library
only and keeps to Python 3.6 syntax, since a task's image may carry an old interpreter.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def source(name: str) -> str:
    """The text of the script ``name`` (``collect`` or ``runner``)."""
    return Path(__file__).with_name(f"{name}.py").read_text(encoding="utf-8")
