"""The bundled sample problems (``data/samples.jsonl``): statements, reference solutions, test generators.

Run ``python -m cascade_envs.envs.code.samples`` to regenerate the file. Tests are seeded, include
edge cases and large cases sized so that a correct Python solution passes comfortably while the
naive quadratic one needs far longer than the time limit; the references are executed here to produce the
expected outputs (so every test is consistent with a real solution).
"""

from __future__ import annotations

import heapq
import json
import random
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROMPT = (
    "Solve the following problem. {lang}Put the complete solution in one fenced code block at the end "
    "of your answer.\n\n{statement}"
)


@dataclass
class Problem:
    id: str
    statement: str
    solve: Callable[[str], str]
    cases: Callable[[random.Random], list[str]]
    meta: dict[str, Any] = field(default_factory=dict)
    fn_name: str | None = None


def _ints(text: str) -> list[int]:
    return list(map(int, text.split()))


def sum_big(inp: str) -> str:
    return "\n".join(str(a + b) for a, b in (map(int, line.split()) for line in inp.splitlines()[1:])) + "\n"


def inversions(inp: str) -> str:
    a = _ints(inp)[1:]
    ranks = {v: i + 1 for i, v in enumerate(sorted(set(a)))}
    tree, total = [0] * (len(ranks) + 1), 0
    for seen, v in enumerate(a):
        r, smaller_equal = ranks[v], 0
        while r:
            smaller_equal, r = smaller_equal + tree[r], r & (r - 1)
        total += seen - smaller_equal
        r = ranks[v]
        while r < len(tree):
            tree[r] += 1
            r += r & -r
    return f"{total}\n"


def shortest_paths(inp: str) -> str:
    data = _ints(inp)
    n, m = data[0], data[1]
    adj: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]
    for k in range(m):
        u, v, w = data[2 + 3 * k : 5 + 3 * k]
        adj[u].append((v, w))
        adj[v].append((u, w))
    dist = [-1] * (n + 1)
    heap = [(0, 1)]
    while heap:
        d, u = heapq.heappop(heap)
        if dist[u] != -1:
            continue
        dist[u] = d
        for v, w in adj[u]:
            if dist[v] == -1:
                heapq.heappush(heap, (d + w, v))
    return " ".join(map(str, dist[1:])) + "\n"


def lis(inp: str) -> str:
    tails: list[int] = []
    for v in _ints(inp)[1:]:
        i = bisect_left(tails, v)
        tails[i : i + 1] = [v]
    return f"{len(tails)}\n"


def brackets(inp: str) -> str:
    out = []
    for s in inp.split()[1:]:
        stack, ok = [], True
        for ch in s:
            if ch in "([{":
                stack.append(ch)
            elif not stack or "([{"[")]}".index(ch)] != stack.pop():
                ok = False
                break
        out.append("YES" if ok and not stack else "NO")
    return "\n".join(out) + "\n"


def count_primes(inp: str) -> str:
    out = []
    for n in _ints(inp)[1:]:
        if n < 2:
            out.append(0)
            continue
        sieve = bytearray([1]) * (n + 1)
        sieve[0:2] = b"\x00\x00"
        for i in range(2, int(n**0.5) + 1):
            if sieve[i]:
                sieve[i * i :: i] = bytes(len(range(i * i, n + 1, i)))
        out.append(sum(sieve))
    return "\n".join(map(str, out)) + "\n"


def edit_distance(inp: str) -> str:
    a, b = [*inp.split("\n"), "", ""][:2]
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return f"{prev[-1]}\n"


def mean_std(inp: str) -> str:
    a = _ints(inp)[1:]
    mean = sum(a) / len(a)
    var = sum((x - mean) ** 2 for x in a) / len(a)
    return f"{mean:.6f} {var**0.5:.6f}\n"


def pair_sum(inp: str) -> str:
    data = _ints(inp)
    s, a = data[1], data[2:]
    seen: dict[int, int] = {}
    for j, v in enumerate(a):
        if s - v in seen:
            return f"{seen[s - v] + 1} {j + 1}\n"
        seen.setdefault(v, j)
    return "-1\n"


def merge_intervals(inp: str) -> str:
    (intervals,) = [json.loads(line) for line in inp.splitlines()]
    merged: list[list[int]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return json.dumps(merged)


PAIR_CHECKER = """import sys
inp, out, ans = (open(p).read().split() for p in sys.argv[1:4])
n, s, a = int(inp[0]), int(inp[1]), list(map(int, inp[2:]))
if ans == ["-1"]:
    sys.exit(0 if out == ["-1"] else 1)
if len(out) != 2 or not all(t.lstrip("-").isdigit() for t in out):
    print("expected two indices", file=sys.stderr); sys.exit(2)
i, j = map(int, out)
ok = 1 <= i < j <= n and a[i - 1] + a[j - 1] == s
if not ok: print("not a valid pair", file=sys.stderr)
sys.exit(0 if ok else 1)
"""


def _arr(rng: random.Random, n: int, lo: int, hi: int) -> str:
    return f"{n}\n" + " ".join(str(rng.randint(lo, hi)) for _ in range(n)) + "\n"


def _graph(rng: random.Random, n: int, m: int, w: int) -> str:
    edges = [(rng.randint(1, n), rng.randint(1, n), rng.randint(1, w)) for _ in range(m)]
    return f"{n} {m}\n" + "".join(f"{u} {v} {c}\n" for u, v, c in edges)


def _brackets(rng: random.Random, n: int, balanced: bool) -> str:
    if not balanced:
        return "".join(rng.choice("()[]{}") for _ in range(n))
    out: list[str] = []
    stack: list[str] = []
    for _ in range(n):
        if stack and (rng.random() < 0.5 or len(stack) > n // 2):
            out.append(")]}"["([{".index(stack.pop())])
        else:
            stack.append(rng.choice("([{"))
            out.append(stack[-1])
    return "".join(out) + "".join(")]}"["([{".index(c)] for c in reversed(stack))


PROBLEMS = [
    Problem(
        "sum-big",
        "Each of the T lines (T given first) holds two integers a and b with |a|, |b| <= 10^18. "
        "Print a+b for each line.",
        sum_big,
        lambda r: [
            "1\n1 2\n",
            "2\n-5 5\n0 0\n",
            "1\n1000000000000000000 1000000000000000000\n",
            "3\n-1000000000000000000 -1000000000000000000\n2147483647 1\n-2147483648 -1\n",
            "200\n"
            + "".join(f"{r.randint(-(10**18), 10**18)} {r.randint(-(10**18), 10**18)}\n" for _ in range(200)),
        ],
    ),
    Problem(
        "inversions",
        "Given n (1 <= n <= 2*10^4) and an array of n integers (|a_i| <= 10^9), print the number "
        "of pairs i < j with a_i > a_j.",
        inversions,
        lambda r: [
            "1\n5\n",
            "2\n2 1\n",
            "5\n1 1 1 1 1\n",
            "5\n5 4 3 2 1\n",
            _arr(r, 10, -3, 3),
            _arr(r, 1000, -(10**9), 10**9),
            "20000\n" + " ".join(map(str, range(20000, 0, -1))) + "\n",
            _arr(r, 20000, 0, 99999),
        ],
    ),
    Problem(
        "shortest-paths",
        "An undirected graph has n vertices and m weighted edges (first line n m, then m "
        "lines u v w; 1 <= n, m <= 2*10^4, 1 <= w <= 10^9; loops and multi-edges allowed). Print the shortest "
        "distance from vertex 1 to each vertex 1..n on one line, or -1 when unreachable.",
        shortest_paths,
        lambda r: [
            "1 1\n1 1 5\n",
            "3 1\n2 3 4\n",
            "4 4\n1 2 1\n2 3 1\n1 3 5\n3 4 1000000000\n",
            _graph(r, 50, 80, 100),
            _graph(r, 5000, 12000, 10**9),
            _graph(r, 1000, 15000, 10),
        ],
    ),
    Problem(
        "lis",
        "Given n (1 <= n <= 2*10^4) and n integers, print the length of the longest strictly "
        "increasing subsequence.",
        lis,
        lambda r: [
            "1\n7\n",
            "5\n2 2 2 2 2\n",
            "6\n1 3 2 4 3 5\n",
            _arr(r, 20, 0, 5),
            "20000\n" + " ".join(map(str, range(20000))) + "\n",
            _arr(r, 20000, 0, 99999),
        ],
    ),
    Problem(
        "brackets",
        "Given T strings of the characters ()[]{} (T first, then one string per line, total length "
        "<= 2*10^5), print YES if a string is balanced and NO otherwise.",
        brackets,
        lambda r: [
            "3\n()\n([)]\n{[]}\n",
            "2\n(((\n)(\n",
            "1\n" + _brackets(r, 10, True) + "\n",
            "4\n" + "\n".join(_brackets(r, 200, r.random() < 0.5) for _ in range(4)) + "\n",
            "2\n" + _brackets(r, 60000, True) + "\n" + _brackets(r, 60000, True)[:-1] + "]\n",
        ],
    ),
    Problem(
        "count-primes",
        "For each of the T queries (T <= 5, each n <= 2*10^6) print how many primes are <= n.",
        count_primes,
        lambda r: ["3\n0\n1\n2\n", "2\n10\n100\n", "1\n2000000\n", "3\n999983\n999982\n1999993\n"],
    ),
    Problem(
        "edit-distance",
        "Given two strings of lowercase letters on two lines (each of length <= 1000), print "
        "their edit distance (insertions, deletions, substitutions cost 1). A line may be empty.",
        edit_distance,
        lambda r: [
            "kitten\nsitting\n",
            "\nabc\n",
            "abc\n\n",
            "same\nsame\n",
            "".join(r.choice("ab") for _ in range(1000))
            + "\n"
            + "".join(r.choice("ab") for _ in range(1000))
            + "\n",
        ],
    ),
    Problem(
        "mean-std",
        "Given n (1 <= n <= 2*10^4) and n integers (|a_i| <= 10^6), print their mean and population "
        "standard deviation separated by a space; answers within 1e-6 (absolute or relative) are accepted.",
        mean_std,
        lambda r: [
            "1\n5\n",
            "2\n1 2\n",
            "3\n-1000000 0 1000000\n",
            _arr(r, 1000, -(10**6), 10**6),
            _arr(r, 20000, -(10**6), 10**6),
        ],
        {"float_tolerance": 1e-6},
    ),
    Problem(
        "pair-sum",
        "The first line holds n and s (2 <= n <= 2*10^4, |s| <= 2*10^9), the second n integers. "
        "Print two indices i < j (1-based) with a_i + a_j = s, any valid pair, or -1 if there is none.",
        pair_sum,
        lambda r: [
            "4 5\n1 4 2 3\n",
            "2 9\n1 2\n",
            "3 0\n0 0 0\n",
            "5 -2\n-1 -1 5 5 5\n",
            "20000 3\n" + " ".join(["1"] * 19999 + ["2"]) + "\n",
            "20000 7\n" + " ".join(str(r.randint(0, 10**5) * 2) for _ in range(20000)) + "\n",
        ],
        {"checker": {"language": "python", "source": PAIR_CHECKER}},
    ),
    Problem(
        "merge-intervals",
        "Implement merge(intervals): given a list of [start, end] intervals (start <= end), "
        "return the union as a sorted list of disjoint intervals; touching intervals merge.",
        merge_intervals,
        lambda r: [
            "[[1, 3], [2, 6], [8, 10], [15, 18]]",
            "[[1, 4], [4, 5]]",
            "[[5, 5]]",
            "[]",
            json.dumps([[a, a + r.randint(0, 50)] for a in (r.randint(0, 1000) for _ in range(300))]),
        ],
        fn_name="merge",
    ),
]


def rows() -> list[dict[str, Any]]:
    out = []
    for p in PROBLEMS:
        inputs = p.cases(random.Random(p.id))
        lang = "Use Python 3 or C++17. " if p.fn_name is None else "Use Python 3 and define the function. "
        outputs = [p.solve(i) for i in inputs]
        meta: dict[str, Any] = {
            "unit_tests": {"inputs": inputs, "outputs": outputs, "fn_name": p.fn_name},
            # the first (small) case is the example a solver may check itself on (CodeEnv.acheck)
            "public_tests": {"inputs": inputs[:1], "outputs": outputs[:1]},
            **p.meta,
        }
        out.append(
            {
                "id": f"code-sample/{p.id}",
                "responses_create_params": {
                    "input": [{"role": "user", "content": PROMPT.format(lang=lang, statement=p.statement)}]
                },
                "verifier_metadata": meta,
                "dataset": "cascade-envs-samples",
            }
        )
    return out


def main() -> None:
    path = Path(__file__).with_name("data") / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    print(f"wrote {len(PROBLEMS)} problems to {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
