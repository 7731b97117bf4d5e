"""Resumable result files, shared by ``filter`` and ``solve``: what a rerun compares and rereads.

A run writes its arguments once and appends one JSON line per finished unit of work, flushed as
it goes; a rerun with the same arguments rereads the lines (a line a kill cut short is skipped, so
that unit is redone), skips what is done, and rewrites the file atomically; a rerun with other
arguments is refused (``changed``) unless told to start over.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def changed(saved: dict[str, Any], current: dict[str, Any], keys: Iterable[str]) -> list[str]:
    """``"key: old -> new"`` for each of ``keys`` whose saved value differs from the current one."""
    return [
        f"{key}: {saved.get(key)!r} -> {current.get(key)!r}"
        for key in keys
        if saved.get(key) != current.get(key)
    ]


def read_objects(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file, one per line; a line that does not parse (cut by a kill) is skipped."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as fh:
        for text in fh:
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict):
                yield data


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step (a kill leaves the old file or the new one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
