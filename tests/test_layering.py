"""Layering: every module imports on its own, and first-party imports form no cycle.

The first check imports each module of the package (``cascade_envs`` and the mapped subpackages
``envs``, ``plugins``, ``trainer``) with every ``cascade_envs`` entry cleared from ``sys.modules``
first, in a few fresh interpreters side by side; a module whose optional extra (vllm, ...) is not
installed is skipped. The others read the sources with ``ast``: the graph of imports that run at
import time (not inside functions, not under ``if TYPE_CHECKING:``) must have no cycle, and neither
may the graph of every import, those inside functions and under ``TYPE_CHECKING`` included (a
function-level import that closes a circle only hides it from the interpreter).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "cascade_envs"
SKIP = {"cascade_envs.__main__", "cascade_envs.cli.__main__"}
"""Modules that run a program when imported."""
KNOWN_CYCLES: set[frozenset[str]] = set()
"""Module pairs whose mutual import is allowed for now: none."""


def package_dirs() -> dict[str, Path]:
    """``{package: folder}`` as mapped in setup.py (``cascade_envs.envs`` -> ``envs/``)."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "PACKAGE_DIRS" for t in node.targets):
            return {name: ROOT / folder for name, folder in ast.literal_eval(node.value).items()}
    raise AssertionError("setup.py defines no PACKAGE_DIRS")


def module_files(dirs: dict[str, Path] | None = None) -> dict[str, Path]:
    """Every first-party module name with its source file."""
    dirs = package_dirs() if dirs is None else dirs
    modules: dict[str, Path] = {}
    for package, folder in dirs.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if "__pycache__" in parts or not all(
                (folder / Path(*parts[:i]) / "__init__.py").exists() for i in range(len(parts))
            ):
                continue  # not inside a regular package (data or build folders)
            sub = [p for p in parts if p != "__init__"]
            name = ".".join([package, *sub])
            if any(
                name == other or name.startswith(other + ".")
                for other in dirs
                if other != package and other.startswith(package + ".")
            ):
                continue  # a mapped subpackage is walked from its own folder
            modules[name] = path
    return modules


# ---------------------------------------------------------------------------------------------
# every module imports alone


IMPORT_ONE_BY_ONE = r"""
import importlib, importlib.util, json, re, sys, traceback

from cascade_envs._extras import EXTRA_OF_MODULE

def missing_extra(exc):
    name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if name is None:
        match = re.search(r"needs '([\w.]+)', which is not installed", str(exc))
        name = match and match.group(1)
    top = (name or "").split(".")[0]
    return top if top in EXTRA_OF_MODULE and importlib.util.find_spec(top) is None else None

results = {}
for name in json.loads(sys.argv[1]):
    for key in [k for k in sys.modules if k == "cascade_envs" or k.startswith("cascade_envs.")]:
        del sys.modules[key]
    try:
        importlib.import_module(name)
        results[name] = "ok"
    except BaseException as exc:
        extra = missing_extra(exc)
        results[name] = f"skip: needs {extra}" if extra else traceback.format_exc(limit=-8)
print("RESULTS " + json.dumps(results))
"""


def _import_chunk(names: list[str]) -> dict[str, str]:
    env = {**os.environ, "CASCADE_ENVS_DISABLE_PLUGIN_AUTOLOAD": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ONE_BY_ONE, json.dumps(names)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    assert line is not None, f"the import checker crashed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return json.loads(line.removeprefix("RESULTS "))


def test_every_module_imports_alone() -> None:
    names = sorted(set(module_files()) - SKIP)
    workers = max(1, min(4, os.cpu_count() or 1))
    chunks = [names[i::workers] for i in range(workers)]
    results: dict[str, str] = {}
    with ThreadPoolExecutor(workers) as pool:
        for part in pool.map(_import_chunk, chunks):
            results.update(part)
    assert set(results) == set(names)
    failed = {n: r for n, r in results.items() if r != "ok" and not r.startswith("skip:")}
    assert not failed, "modules that fail to import on their own:\n" + "\n".join(
        f"--- {n}\n{r}" for n, r in sorted(failed.items())
    )
    assert sum(r == "ok" for r in results.values()) > len(names) // 2


# ---------------------------------------------------------------------------------------------
# no import cycles


def _import_time_nodes(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module is imported (not in functions or TYPE_CHECKING)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _import_time_nodes(node.orelse)
        else:  # class bodies, if/try/with/for blocks, except handlers, match cases
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from _import_time_nodes([child])
                elif isinstance(child, (ast.ExceptHandler, ast.match_case)):
                    yield from _import_time_nodes(child.body)


def _every_node(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, wherever it is (functions and ``TYPE_CHECKING`` blocks included)."""
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def import_graph(modules: dict[str, Path], *, every: bool = False) -> dict[str, set[str]]:
    """``module -> first-party modules it imports at import time`` (with their non-ancestor packages);
    ``every``: the modules it imports anywhere, inside functions and under ``TYPE_CHECKING`` too."""
    graph: dict[str, set[str]] = {}
    nodes = _every_node if every else _import_time_nodes
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in nodes(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in modules else base)
        edges: set[str] = set()
        for target in targets:
            while target and target not in modules:  # "import a.b.c.attr" style: the longest module
                target = target.rpartition(".")[0]
            if not target:
                continue  # third-party
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                node_name = ".".join(parts[:i])
                ancestor = name == node_name or name.startswith(node_name + ".")
                if node_name in modules and not ancestor:
                    edges.add(node_name)  # importing a.b.c runs a/__init__ and a/b/__init__ first
        graph[name] = {t for t in edges if frozenset((name, t)) not in KNOWN_CYCLES}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path ``a, b, ..., a``) per strongly connected component (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                components.append(component)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                connect(v)
    finally:
        sys.setrecursionlimit(limit)
    return [_one_cycle(graph, set(c)) for c in components]


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:  # breadth-first: the shortest way back to start
        v = queue.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError("not a cycle")  # pragma: no cover


def test_module_level_imports_have_no_cycle() -> None:
    modules = module_files()
    assert {
        "cascade_envs.registry",
        "cascade_envs.plugins.manager",
        "cascade_envs.envs.code.service",
        "cascade_envs.trainer.config",
    } <= set(modules)
    cycles = find_cycles(import_graph(modules))
    assert not cycles, "first-party import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_cycle_even_through_imports_inside_functions() -> None:
    cycles = find_cycles(import_graph(module_files(), every=True))
    assert not cycles, (
        "first-party import cycles (function-level and TYPE_CHECKING imports counted):\n"
        + "\n".join(" -> ".join(c) for c in cycles)
    )


def test_the_kernel_sandbox_layer_imports_no_env() -> None:
    graph = import_graph(module_files())
    for name, targets in graph.items():
        if name.startswith("cascade_envs.sandbox"):
            assert not {t for t in targets if t.startswith("cascade_envs.envs")}, name


def test_the_cycle_finder_reports_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert sorted(find_cycles(graph)) == [["a", "b", "c", "a"], ["e", "e"]]


def test_the_graph_reads_what_runs_at_import(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "from .a import A\n",
        "pkg/a.py": "import os\nfrom .sub.b import B\nA = 1\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": textwrap.dedent("""
            from typing import TYPE_CHECKING
            from .. import a  # a module: an edge to pkg.a
            from ..a import A
            if TYPE_CHECKING:
                from ..c import C
            try:
                import pkg.c
            except ImportError:
                pass
            def later():
                from ..d import D
            class K:
                from . import e
            B = 2
        """),
        "pkg/c.py": "",
        "pkg/d.py": "",
        "pkg/sub/e.py": "",
        "mapped/__init__.py": "from pkg.sub import b\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    modules = module_files({"pkg": tmp_path / "pkg", "pkg.mapped": tmp_path / "mapped"})
    assert sorted(modules) == [
        "pkg",
        "pkg.a",
        "pkg.c",
        "pkg.d",
        "pkg.mapped",
        "pkg.sub",
        "pkg.sub.b",
        "pkg.sub.e",
    ]
    graph = import_graph(modules)
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.a", "pkg.c", "pkg.sub.e"}
    assert graph["pkg.mapped"] == {"pkg.sub", "pkg.sub.b"}
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]
    every = import_graph(modules, every=True)
    assert every["pkg.sub.b"] == {"pkg.a", "pkg.c", "pkg.d", "pkg.sub.e"}  # later()'s and TYPE_CHECKING's too
