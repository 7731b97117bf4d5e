"""mkdocs hook (mkdocs.yml ``hooks:``): lays out the ``cascade_envs`` import package for the API reference.

setup.py's ``PACKAGE_DIRS`` maps the top-level folders envs/, plugins/ and trainer/ onto
``cascade_envs.envs``/``.plugins``/``.trainer``, so the source tree does not have the import
package's shape, and griffe (the static loader behind mkdocstrings' ``:::`` blocks) finds packages
by their folders. Before every build (``mkdocs build`` or ``serve``), this copies the mapped
folders' ``.py`` files into that shape under build/docs-src/, the Python handler's ``paths``.
Nothing is imported or installed; a copy, not symlinks, because griffe resolves symlinks back to
the source folder. Built beside the old copy and swapped in, so a build running at the same time
never sees half a tree.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

sys.path.insert(0, str(Path(__file__).parent))  # mkdocs loads hooks by path: .ci is no package
from package_dirs import package_dirs

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "build" / "docs-src"


def lay_out(root: Path, output: Path) -> None:
    """Copy every mapped folder's Python files to ``output/<package path>``."""
    output.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=output.name + ".", dir=output.parent))
    for package, folder in package_dirs(root / "setup.py").items():
        source = root / folder
        target = fresh.joinpath(*package.split("."))
        for dirpath, dirnames, filenames in os.walk(source):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.startswith(".")]
            for name in filenames:
                if name.endswith((".py", ".pyi")):
                    path = Path(dirpath, name)
                    copy = target / path.relative_to(source)
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, copy)
    stale = output.with_name(fresh.name + ".old")
    if output.exists():
        output.rename(stale)
    fresh.rename(output)
    shutil.rmtree(stale, ignore_errors=True)


@event_priority(100)  # before mkdocstrings reads anything
def on_config(config: Any) -> Any:
    lay_out(ROOT, OUTPUT)
    return config
