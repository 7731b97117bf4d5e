"""Writes docs/training/config.md, the run-config reference, from the trainer's config dataclasses.

Every key, its type, its default and its docstring come from ``trainer/config.py`` (the attribute
docstrings are read with ``ast``), so the page cannot drift from the code:
``tests/test_config_reference.py`` fails when the committed page differs from what this writes.

    python .ci/config_reference.py            # rewrite the page
    python .ci/config_reference.py --check    # exit 1 when the page is stale
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "trainer" / "config.py"
PAGE = ROOT / "docs" / "training" / "config.md"

HEADER = """# Run configuration reference

Every key of a run config (`cascade-envs train CONFIG.yaml`, `--set KEY=VALUE`), with its type and
default. This page is generated from `trainer/config.py` by `python .ci/config_reference.py`, and a test
fails when it is stale. Unknown keys and values outside a key's type are refused before the model
loads, naming the key. A pipeline file (a top-level `stages:` list) is described in
[Cascade RL pipelines](cascade.md#writing-a-pipeline).
"""


def _attribute_docs(tree: ast.Module) -> dict[str, tuple[str, dict[str, str]]]:
    """``{class name: (class docstring, {field: docstring})}`` for every class of the module."""
    found: dict[str, tuple[str, dict[str, str]]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs: dict[str, str] = {}
        for previous, current in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(previous, ast.AnnAssign)
                and isinstance(previous.target, ast.Name)
                and isinstance(current, ast.Expr)
                and isinstance(current.value, ast.Constant)
                and isinstance(current.value.value, str)
            ):
                docs[previous.target.id] = current.value.value
        found[node.name] = (ast.get_docstring(node) or "", docs)
    return found


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Module-level type aliases (``EngineName = Literal[...]``) as their source text."""
    return {
        node.targets[0].id: ast.unparse(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }


def _markdown(text: str) -> str:
    """A docstring as one Markdown table cell: RST literals to code, one line, pipes escaped."""
    text = re.sub(r"``(.+?)``", r"`\1`", " ".join(text.split()))
    return text.replace("|", "\\|")


def _type(annotation: Any, aliases: dict[str, str]) -> str:
    text = str(annotation)
    for _ in range(3):  # aliases of aliases
        text = re.sub(r"\b[A-Z]\w+\b", lambda m: aliases.get(m.group(0), m.group(0)), text)
    text = text.replace("Literal[", "one of [").replace(" | ", " or ")
    return f"`{text}`"


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value!r}`" if isinstance(value, str) and not value else f"`{value}`"


def render() -> str:
    sys.path.insert(0, str(ROOT))
    from cascade_envs.trainer import config  # the installed package maps trainer/ onto it

    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    docs, aliases = _attribute_docs(tree), _aliases(tree)
    lines = [HEADER]
    top = [f for f in dataclasses.fields(config.Config) if f.name in {"algorithm", "name", "description"}]
    lines += ["## Top level", "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for f in top:
        meaning = _markdown(docs["Config"][1].get(f.name, ""))
        lines.append(f"| `{f.name}` | {_type(f.type, aliases)} | {_default(f)} | {meaning} |")
    for section in dataclasses.fields(config.Config):
        cls = section.default_factory
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            continue
        class_doc, field_docs = docs[cls.__name__]
        lines += ["", f"## `{section.name}`", ""]
        if class_doc:
            lines += [_markdown(class_doc).replace("\\|", "|"), ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            meaning = _markdown(field_docs.get(f.name, ""))
            lines.append(
                f"| `{section.name}.{f.name}` | {_type(f.type, aliases)} | {_default(f)} | {meaning} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = parser.parse_args()
    page = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python .ci/config_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
