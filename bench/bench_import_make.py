"""Start-up cost: ``import cascade_envs``, plugin discovery and ``make()`` of every registered env,
next to ``import gymnasium`` and ``gymnasium.make("CartPole-v1")`` as the reference.

Every "cold" number is taken in a fresh interpreter (median of ``--runs``); "repeated" is the
median of ``--repeat`` further ``make()`` calls in that interpreter (task files are cached).

    python bench/bench_import_make.py [--runs 7] [--repeat 20] [--env ID ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap

IMPORT = """
import json, time
start = time.perf_counter()
import {module}
print(json.dumps({{"seconds": time.perf_counter() - start}}))
"""

DISCOVER = """
import json, time
import cascade_envs
start = time.perf_counter()
cascade_envs.env_specs()
print(json.dumps({"seconds": time.perf_counter() - start}))
"""

MAKE = """
import json, time
import {module}
{discover}
discovered = time.perf_counter()
try:
    {make}
except Exception as exc:  # an env that needs an extra or a server: report, do not stop the bench
    print(json.dumps({{"error": f"{{type(exc).__name__}}: {{exc}}"[:120]}}))
    raise SystemExit(0)
first = time.perf_counter()
repeated = []
for _ in range({repeat}):
    t = time.perf_counter()
    {make}
    repeated.append(time.perf_counter() - t)
repeated.sort()
print(json.dumps({{"first": first - discovered, "repeated": repeated[len(repeated) // 2]}}))
"""


def fresh(code: str, cwd: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:120]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_of(runs: int, code: str, cwd: str) -> dict:
    """Per-key medians over ``runs`` fresh interpreters (or the first error)."""
    results = [fresh(code, cwd) for _ in range(runs)]
    errors = [r for r in results if "error" in r]
    if errors:
        return errors[0]
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


def make_code(module: str, env_id: str, repeat: int) -> str:
    if module == "gymnasium":
        return MAKE.format(
            module=module, discover="pass", make=f"gymnasium.make({env_id!r}).close()", repeat=repeat
        )
    return MAKE.format(
        module=module,
        discover="cascade_envs.env_specs()",
        make=f"cascade_envs.make({env_id!r}).close()",
        repeat=repeat,
    )


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:9.2f}"


def row(label: str, ours: float | None, ref: float | None, note: str = "") -> None:
    ratio = f"{ours / ref:8.2f}x" if ours is not None and ref else "        -"
    print(f"{label:<48} {ms(ours):>10} {ms(ref):>10} {ratio}  {note}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per cold number")
    parser.add_argument("--repeat", type=int, default=20, help="make() calls for the repeated number")
    parser.add_argument("--env", action="append", help="env id to time (default: every registered env)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as cwd:  # outside the repository: import the installed package
        env_ids = (
            args.env
            or fresh(
                "import json, cascade_envs; print(json.dumps({'ids': list(cascade_envs.env_specs())}))", cwd
            )["ids"]
        )
        print(f"{'':<48} {'ours ms':>10} {'ref ms':>10} {'ratio':>9}  (reference: gymnasium / CartPole-v1)")
        ours = median_of(args.runs, IMPORT.format(module="cascade_envs"), cwd)
        ref = median_of(args.runs, IMPORT.format(module="gymnasium"), cwd)
        row("import", ours.get("seconds"), ref.get("seconds"), ours.get("error", ""))
        discovery = median_of(args.runs, DISCOVER, cwd)
        row(
            "plugin discovery (first registry access)",
            discovery.get("seconds"),
            None,
            discovery.get("error", "gymnasium has no discovery step"),
        )
        reference = median_of(args.runs, make_code("gymnasium", "CartPole-v1", args.repeat), cwd)
        for env_id in env_ids:
            result = median_of(args.runs, make_code("cascade_envs", env_id, args.repeat), cwd)
            if "error" in result:
                row(f"make {env_id}", None, None, result["error"])
                continue
            row(f"make {env_id} (first)", result["first"], reference.get("first"))
            row(f"make {env_id} (repeated)", result["repeated"], reference.get("repeated"))


if __name__ == "__main__":
    main()
