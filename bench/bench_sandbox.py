"""Per-test overhead of each sandbox backend (bwrap, docker, local) vs. a bare ``subprocess.run``, in one run.

Each backend sets up one session per response (one sandbox start) and runs all of that response's
tests inside it, as the code env does. Printed per language: the bare time per test, each backend's
time per test (amortising the session start over ``--tests-per-response`` tests) with its ratio to
bare, and each backend's session start+close time. A backend that cannot run here (no daemon, the
docker image not built: ``cascade-envs build-image sandbox``) is listed as skipped, saying why.
Goals: <= 1.2x bare for Python, <= 2x for C++.

    python bench/bench_sandbox.py [--responses 15] [--tests-per-response 50] [--backends bwrap,docker,local]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from cascade_envs.sandbox import EXECUTABLE, File, Sandbox, available_backends, get_sandbox

PY_SRC = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"
CPP_SRC = (
    '#include <cstdio>\nint main(){long long s=0,x;while(scanf("%lld",&x)==1)s+=x;printf("%lld\\n",s);}\n'
)
STDIN = " ".join(map(str, range(1000))) + "\n"
EXPECTED = b"499500\n"


def bare_response(argv: list[str], cwd: str, per: int) -> float:
    start = time.perf_counter()
    for _ in range(per):
        out = subprocess.run(argv, input=STDIN.encode(), capture_output=True, cwd=cwd, timeout=10)
        assert out.stdout == EXPECTED
    return time.perf_counter() - start


async def sandboxed_response(sb: Sandbox, files: dict, argv: list[str], per: int) -> float:
    start = time.perf_counter()
    async with await sb.asession(files=files) as s:
        for _ in range(per):
            res = await s.arun(argv, STDIN, timeout_s=10)
            assert res.stdout == EXPECTED, res
    return time.perf_counter() - start


def measure(
    backend: str, bare_argv: list[str], files: dict, argv: list[str], cwd: str, responses: int, per: int
) -> tuple[float, float, float]:
    """Seconds per test (bare, sandboxed) and per session start+close, alternating response by response
    so that load drift hits both sides alike."""
    sb = get_sandbox(backend)
    loop = asyncio.new_event_loop()
    ref, ours, starts = [], [], []
    try:
        loop.run_until_complete(sandboxed_response(sb, files, argv, 2))  # warm-up
        for _ in range(responses):
            ref.append(bare_response(bare_argv, cwd, per) / per)
            ours.append(loop.run_until_complete(sandboxed_response(sb, files, argv, per)) / per)
            starts.append(loop.run_until_complete(sandboxed_response(sb, files, argv, 0)))
    finally:
        loop.close()
    return statistics.median(ref), statistics.median(ours), statistics.median(starts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--responses", type=int, default=15)
    ap.add_argument(
        "--tests-per-response",
        type=int,
        default=50,
        help="tests run in one session (the public code_gen rows have a median of 82)",
    )
    ap.add_argument("--backends", default="bwrap,docker,local", help="comma-separated (default %(default)s)")
    args = ap.parse_args()
    available = available_backends()
    backends = []
    for name in args.backends.split(","):
        why = available.get(name, "not registered") or _image_missing(name)
        if why:
            print(f"{name}: skipped ({' '.join(why.split())})")
        else:
            backends.append(name)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "sol.py").write_text(PY_SRC)
        Path(tmp, "sol.cpp").write_text(CPP_SRC)
        subprocess.run(["g++", "-O2", "-std=c++17", "sol.cpp", "-o", "sol"], cwd=tmp, check=True)
        binary = Path(tmp, "sol").read_bytes()
        python = get_sandbox("unsafe-subprocess").python
        cases = {
            "python": ([python, "sol.py"], {"sol.py": PY_SRC}, [python, "sol.py"]),
            "c++": ([f"{tmp}/sol"], {"sol": File(binary, EXECUTABLE)}, ["./sol"]),
        }
        goals = {"python": 1.2, "c++": 2.0}
        print(
            f"{args.responses} responses x {args.tests_per_response} tests per backend and language; median over "
            "responses of the time per test (session start included), and of one session's start+close"
        )
        print(
            f"{'language':8} {'bare ms/test':>12}"
            + "".join(f" {b + ' ms/test':>16} {'ratio':>6}" for b in backends)
            + "".join(f" {b + ' session ms':>18}" for b in backends)
            + "  goal"
        )
        for lang, (bare_argv, files, argv) in cases.items():
            rows = {
                b: measure(b, bare_argv, files, argv, tmp, args.responses, args.tests_per_response)
                for b in backends
            }
            bare = statistics.median(r[0] for r in rows.values()) if rows else 0.0
            cells = "".join(f" {o * 1e3:16.2f} {o / r:5.2f}x" for r, o, _ in rows.values())
            starts = "".join(f" {st * 1e3:18.1f}" for _, _, st in rows.values())
            print(f"{lang:8} {bare * 1e3:12.2f}{cells}{starts}  <= {goals[lang]}x")


def _image_missing(backend: str) -> str | None:
    """Why the docker backend's default image cannot be used here (``None``: it can, or not docker)."""
    if backend != "docker":
        return None
    from cascade_envs.sandbox import images

    try:
        spec = images.BASES["sandbox"]
        return (
            None
            if images.labelled(images.client(), spec.name, spec.key)
            else (f"image {spec.name} missing: {images.build_hint(spec.name)}")
        )
    except Exception as exc:
        return str(exc)


if __name__ == "__main__":
    main()
