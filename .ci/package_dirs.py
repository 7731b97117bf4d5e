"""setup.py's ``PACKAGE_DIRS`` (``{"cascade_envs.envs": "envs", ...}``), read without running setup.py.

Standard library only: the docs hook (.ci/docs_hooks.py) imports it, and .ci/import_layout.sh runs it
with any python3 (``python3 .ci/package_dirs.py``: one ``package folder`` line per mapped subpackage,
the root package left out).
"""

from __future__ import annotations

import ast
from pathlib import Path

SETUP_PY = Path(__file__).resolve().parents[1] / "setup.py"


def package_dirs(setup_py: Path = SETUP_PY) -> dict[str, str]:
    """The ``{package: folder}`` mapping of ``setup_py``."""
    for node in ast.parse(setup_py.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PACKAGE_DIRS" for t in node.targets
        ):
            return dict(ast.literal_eval(node.value))
    raise RuntimeError(f"{setup_py} has no PACKAGE_DIRS mapping")


if __name__ == "__main__":
    for package, folder in package_dirs().items():
        if "." in package:
            print(package, folder)
