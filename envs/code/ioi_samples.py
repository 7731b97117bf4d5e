"""The bundled IOI-style problems (``data/ioi_subtasks.jsonl``): statements, solutions, test generators.

Each problem has a small subtask that a brute force solves and larger ones that need the intended
algorithm, public sample tests (shown in the statement) and seeded hidden tests per subtask. Run
``python -m cascade_envs.envs.code.ioi_samples`` to regenerate the file: the reference solution
(``REFERENCE``) is executed on every input to produce the expected outputs. ``BRUTE`` holds a brute
force for each problem, which earns the first subtask only (``tests/envs/test_code_subtasks.py``).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPT = (
    "Solve the following problem. Use Python 3: read from standard input and write to standard "
    "output. Put the complete solution in one fenced code block at the end of your answer.\n\n{statement}"
)
Gen = Callable[[random.Random], list[str]]


@dataclass
class IOIProblem:
    id: str
    title: str
    statement: str
    samples: list[str]
    subtasks: list[tuple[str, int, Gen]]
    """``(constraints, points, hidden test generator)`` per subtask."""
    time_limit_s: float = 1.0


def _arr(r: random.Random, n: int, lo: int, hi: int) -> str:
    return " ".join(str(r.randint(lo, hi)) for _ in range(n))


def _range_sums(r: random.Random, n: int, q: int) -> str:
    pairs = (sorted((r.randint(1, n), r.randint(1, n))) for _ in range(q))
    return f"{n} {q}\n{_arr(r, n, -(10**6), 10**6)}\n" + "".join(f"{a} {b}\n" for a, b in pairs)


def _grid(r: random.Random, n: int, m: int, wall: float) -> str:
    rows = ["".join("#" if r.random() < wall else "." for _ in range(m)) for _ in range(n)]
    rows[0] = "." + rows[0][1:]
    rows[-1] = rows[-1][:-1] + "."
    return f"{n} {m}\n" + "\n".join(rows) + "\n"


PROBLEMS = [
    IOIProblem(
        "range-sums",
        "Watering the garden",
        "A garden has n beds in a row; bed i needs a_i litres of water (|a_i| <= 10^6; a negative "
        "value means the bed gives water back). Answer q questions: how many litres do beds l..r "
        "need in total?\n\nInput: n and q on the first line, a_1..a_n on the second, then q lines "
        "l r (1 <= l <= r <= n).\nOutput: one line per question with the total.",
        ["3 2\n1 2 3\n1 2\n2 3\n", "1 1\n-5\n1 1\n"],
        [
            (
                "n, q <= 100",
                30,
                lambda r: [_range_sums(r, r.randint(1, 100), r.randint(1, 100)) for _ in range(3)],
            ),
            (
                "n, q <= 2 * 10^4",
                70,
                lambda r: [_range_sums(r, 15000, 15000), _range_sums(r, 15000, 4000)],
            ),
        ],
    ),
    IOIProblem(
        "stairs",
        "Counting climbs",
        "A staircase has n steps. In one move you climb between 1 and k steps. In how many "
        "different ways can you get from the bottom (step 0) to exactly step n? Print the count "
        "modulo 1000000007.\n\nInput: n and k (1 <= n, k).\nOutput: the number of ways modulo 1000000007.",
        ["4 2\n", "3 5\n"],
        [
            ("n <= 15, k <= 3", 20, lambda r: ["1 1\n", "15 3\n", f"{r.randint(5, 15)} 2\n"]),
            (
                "n, k <= 10^5",
                80,
                lambda r: ["100000 100000\n", "100000 2\n", f"{r.randint(5 * 10**4, 10**5)} 777\n"],
            ),
        ],
    ),
    IOIProblem(
        "tower",
        "Tidy tower",
        "n blocks stand in a row with heights h_1..h_n (1 <= h_i <= 10^9). Remove as few blocks "
        "as possible so that the heights of the blocks left, read from left to right, strictly "
        "increase. Print the number of blocks removed.\n\nInput: n on the first line, h_1..h_n on "
        "the second.\nOutput: the smallest number of blocks to remove.",
        ["5\n3 1 2 2 4\n", "3\n5 5 5\n"],
        [
            (
                "n <= 12",
                20,
                lambda r: ["1\n7\n", f"12\n{_arr(r, 12, 1, 6)}\n", f"10\n{_arr(r, 10, 1, 10**9)}\n"],
            ),
            (
                "n <= 2000",
                30,
                lambda r: [f"1500\n{_arr(r, 1500, 1, 50)}\n", f"1500\n{_arr(r, 1500, 1, 10**9)}\n"],
            ),
            (
                "n <= 2 * 10^4",
                50,
                lambda r: [
                    f"20000\n{_arr(r, 2 * 10**4, 1, 10**9)}\n",
                    "20000\n" + " ".join(map(str, range(1, 20001))) + "\n",
                ],
            ),
        ],
        time_limit_s=2.0,
    ),
    IOIProblem(
        "ticket-pairs",
        "Matching tickets",
        "There are n tickets with numbers a_1..a_n (0 <= a_i <= 10^9) and a modulus m (1 <= m <= "
        "10^9). Count the pairs i < j such that a_i + a_j is divisible by m.\n\nInput: n and m on "
        "the first line, a_1..a_n on the second.\nOutput: the number of pairs.",
        ["4 3\n1 2 3 4\n", "3 1\n5 6 7\n"],
        [
            (
                "n <= 500",
                40,
                lambda r: [f"500 7\n{_arr(r, 500, 0, 10**9)}\n", f"2 10\n{_arr(r, 2, 0, 20)}\n"],
            ),
            (
                "n <= 2 * 10^4",
                60,
                lambda r: [
                    f"20000 1000\n{_arr(r, 2 * 10**4, 0, 10**9)}\n",
                    f"20000 2\n{_arr(r, 2 * 10**4, 0, 10**6)}\n",
                ],
            ),
        ],
    ),
    IOIProblem(
        "warehouse",
        "Robot in a warehouse",
        "A warehouse is an n x m grid; '#' marks a shelf, '.' a free cell. A robot starts in the "
        "top-left cell and moves only right or down through free cells to the bottom-right cell "
        "(both corners are free). Count its possible routes modulo 1000000007.\n\nInput: n and m "
        "on the first line (1 <= n, m), then n lines of m characters.\nOutput: the number of routes "
        "modulo 1000000007.",
        ["3 3\n...\n.#.\n...\n", "2 2\n.#\n#.\n"],
        [
            ("n, m <= 6", 30, lambda r: ["1 1\n.\n", _grid(r, 6, 6, 0.2), _grid(r, 5, 6, 0.0)]),
            ("n, m <= 300", 70, lambda r: [_grid(r, 300, 300, 0.0), _grid(r, 300, 250, 0.05)]),
        ],
    ),
]

REFERENCE = {
    "range-sums": """import sys
d = sys.stdin.buffer.read().split()
n, q = int(d[0]), int(d[1])
pre = [0] * (n + 1)
for i in range(n):
    pre[i + 1] = pre[i] + int(d[2 + i])
out = []
for k in range(q):
    l, r = int(d[2 + n + 2 * k]), int(d[3 + n + 2 * k])
    out.append(pre[r] - pre[l - 1])
print("\\n".join(map(str, out)))
""",
    "stairs": """n, k = map(int, input().split())
M = 10**9 + 7
ways = [1] + [0] * n
window = 1
for i in range(1, n + 1):
    ways[i] = window
    window = (window + ways[i] - (ways[i - k] if i - k >= 0 else 0)) % M
print(ways[n] % M)
""",
    "tower": """import sys
from bisect import bisect_left
d = sys.stdin.read().split()
n = int(d[0])
tails = []
for h in map(int, d[1 : n + 1]):
    i = bisect_left(tails, h)
    tails[i : i + 1] = [h]
print(n - len(tails))
""",
    "ticket-pairs": """import sys
from collections import Counter
d = sys.stdin.read().split()
n, m = int(d[0]), int(d[1])
count = Counter(int(x) % m for x in d[2 : 2 + n])
total = 0
for r, c in count.items():
    s = (m - r) % m
    if r < s:
        total += c * count.get(s, 0)
    elif r == s:
        total += c * (c - 1) // 2
print(total)
""",
    "warehouse": """import sys
d = sys.stdin.read().split()
n, m = int(d[0]), int(d[1])
M = 10**9 + 7
row = [0] * m
row[0] = 1
for i in range(n):
    line = d[2 + i]
    left = 0
    for j in range(m):
        left = 0 if line[j] == "#" else (left + row[j]) % M
        row[j] = left
print(row[m - 1])
""",
}

BRUTE = {
    "range-sums": """import sys
d = sys.stdin.read().split()
n, q = int(d[0]), int(d[1])
a = list(map(int, d[2 : 2 + n]))
for k in range(q):
    l, r = int(d[2 + n + 2 * k]), int(d[3 + n + 2 * k])
    total = 0
    for i in range(l - 1, r):
        total += a[i]
    print(total)
""",
    "stairs": """import sys
sys.setrecursionlimit(10000)
n, k = map(int, input().split())
def ways(i):
    if i == n:
        return 1
    return sum(ways(i + s) for s in range(1, k + 1) if i + s <= n)
print(ways(0) % (10**9 + 7))
""",
    "tower": """from itertools import combinations
n = int(input())
h = list(map(int, input().split()))
best = 0
for size in range(1, n + 1):
    for pick in combinations(h, size):
        if all(x < y for x, y in zip(pick, pick[1:])):
            best = size
            break
print(n - best)
""",
    "ticket-pairs": """n, m = map(int, input().split())
a = list(map(int, input().split()))
print(sum((a[i] + a[j]) % m == 0 for i in range(n) for j in range(i + 1, n)))
""",
    "warehouse": """import sys
sys.setrecursionlimit(100000)
n, m = map(int, input().split())
g = [input() for _ in range(n)]
def routes(i, j):
    if i >= n or j >= m or g[i][j] == "#":
        return 0
    if (i, j) == (n - 1, m - 1):
        return 1
    return routes(i + 1, j) + routes(i, j + 1)
print(routes(0, 0) % (10**9 + 7))
""",
}


def run_reference(problem_id: str, given: str) -> str:
    """The reference's output on ``given`` (run with this interpreter, outside any sandbox: trusted code)."""
    done = subprocess.run(
        [sys.executable, "-c", REFERENCE[problem_id]],
        input=given,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def _statement(p: IOIProblem) -> str:
    subtasks = "\n".join(f"{i}. ({points} points) {c}" for i, (c, points, _) in enumerate(p.subtasks, 1))
    examples = "\n\n".join(
        f"Example {i}\nInput:\n{given}Output:\n{run_reference(p.id, given)}"
        for i, given in enumerate(p.samples, 1)
    )
    return f"# {p.title}\n\n{p.statement}\n\nSubtasks:\n{subtasks}\n\n{examples}"


def row(p: IOIProblem) -> dict[str, Any]:
    rng = random.Random(p.id)
    inputs: list[str] = []
    subtasks = []
    for constraints, points, gen in p.subtasks:
        cases = gen(rng)
        subtasks.append(
            {
                "name": constraints,
                "points": points,
                "tests": list(range(len(inputs), len(inputs) + len(cases))),
            }
        )
        inputs += cases
    meta = {
        "unit_tests": {"inputs": inputs, "outputs": [run_reference(p.id, i) for i in inputs]},
        "subtasks": subtasks,
        "public_tests": {"inputs": p.samples, "outputs": [run_reference(p.id, i) for i in p.samples]},
        "time_limit_s": p.time_limit_s,
        "languages": ["python"],
    }
    return {
        "id": f"ioi-sample/{p.id}",
        "responses_create_params": {
            "input": [{"role": "user", "content": PROMPT.format(statement=_statement(p))}]
        },
        "verifier_metadata": meta,
        "dataset": "cascade-envs-ioi-samples",
    }


def main() -> None:
    path = Path(__file__).with_name("data") / "ioi_subtasks.jsonl"
    path.write_text("".join(json.dumps(row(p)) + "\n" for p in PROBLEMS))
    print(f"wrote {len(PROBLEMS)} problems to {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
