"""Per-test overhead of each sandbox backend vs. a bare ``subprocess.run`` of the same program.

Each backend sets up one session per response (one sandbox start) and runs all of that response's
tests inside it, as the code env does. Printed: the session start+close time, the bare time per test,
each backend's time per test (amortising the session start over ``--tests-per-response`` tests), and
the ratio.
Goals: <= 1.2x bare for Python, <= 2x for C++.

    python bench/bench_sandbox.py [--responses 15] [--tests-per-response 50]
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
CPP_SRC = "#include <cstdio>\nint main(){long long s=0,x;while(scanf(\"%lld\",&x)==1)s+=x;printf(\"%lld\\n\",s);}\n"
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


def measure(backend: str, bare_argv: list[str], files: dict, argv: list[str], cwd: str, responses: int,
            per: int) -> tuple[float, float, float]:
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
    ap.add_argument("--tests-per-response", type=int, default=50,
                    help="tests run in one session (the public code_gen rows have a median of 82)")
    args = ap.parse_args()
    backends = [b for b, why in available_backends().items() if why is None]
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
        print(f"{args.responses} responses x {args.tests_per_response} tests per backend and language; "
              "median over responses of the time per test (session start included)")
        print(f"{'language':8} {'backend':18} {'session ms':>10} {'bare ms/test':>12} {'ours ms/test':>12} "
              f"{'ratio':>7}  goal")
        for lang, (bare_argv, files, argv) in cases.items():
            for backend in backends:
                r, o, st = measure(backend, bare_argv, files, argv, tmp, args.responses, args.tests_per_response)
                ok = "ok" if o / r <= goals[lang] else "MISSED"
                print(f"{lang:8} {backend:18} {st * 1e3:10.1f} {r * 1e3:12.2f} {o * 1e3:12.2f} {o / r:6.2f}x  "
                      f"<= {goals[lang]}x {ok}")


if __name__ == "__main__":
    main()
