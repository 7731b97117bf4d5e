"""cascade/Code-v0: extraction, comparison, test formats, checkers, limits and the public rows."""

from __future__ import annotations

import asyncio
import json

import pytest

import cascade_envs
from cascade_envs.envs.code.compare import compare_output, compare_value
from cascade_envs.envs.code.env import CodeEnv
from cascade_envs.envs.code.extract import last_code_block
from cascade_envs.envs.code.judge import Judge, JudgeConfig
from cascade_envs.envs.code.task import parse_code_task


def row(inputs, outputs, fn_name=None, **meta):
    tests = {"inputs": inputs, "outputs": outputs}
    if fn_name:
        tests["fn_name"] = fn_name
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "Solve it."}]},
        "verifier_metadata": {"unit_tests": tests, **meta},
    }


def py(code):
    return f"Here you go:\n```python\n{code}\n```\n"


def cpp(code):
    return f"```cpp\n{code}\n```"


SUM = row(["1 2\n", "-5 5\n", "1000000000000 1\n"], ["3\n", "0\n", "1000000000001\n"])


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def env(request):
    """The env on each backend that keeps the default's promise (docker: see tests/docker_support.py)."""
    from tests.sandbox.conftest import backend_or_skip

    backend_or_skip(request.param)
    return CodeEnv(tasks=[SUM], sandbox=request.param, time_limit_s=2, memory_mb=256, total_time_s=20)


def score(env, task, text):
    return asyncio.run(env.areward(task, text))


# ----- the public rows -------------------------------------------------------------------------


def test_reproduces_the_rewards_of_the_public_rollouts(env, shared_data):
    folder = shared_data / "nemo-gym-rows" / "code_gen"
    rows = {
        json.dumps(r["responses_create_params"]["input"]): r
        for r in map(json.loads, (folder / "example.jsonl").read_text().splitlines())
    }
    rollouts = [json.loads(line) for line in (folder / "example_rollouts.jsonl").read_text().splitlines()]
    assert rows and rollouts
    for rollout in rollouts:
        prompt = [
            {"role": m["role"], "content": m["content"]} for m in rollout["responses_create_params"]["input"]
        ]
        task = rows[json.dumps(prompt)]
        reward = score(env, task, rollout["response"]["output"][0]["content"][0]["text"])
        assert not reward.masked and reward.value == rollout["reward"], (reward, rollout["reward"])


def test_registered_and_loads_the_bundled_samples():
    made = cascade_envs.make("cascade/Code-v0")
    assert isinstance(made, CodeEnv) and len(made.tasks) >= 10


# ----- extraction -------------------------------------------------------------------------------


def test_last_fenced_block_wins_and_its_language_is_read():
    text = "```python\nprint(1)\n```\nthen\n~~~cpp\nint main(){}\n~~~\nand ```inline``` text"
    block = last_code_block(text)
    assert block.language == "cpp" and block.code == "int main(){}\n"
    assert last_code_block("```\nx = 1\n```").language is None
    assert last_code_block("````py\na\n```\nb\n````").code == "a\n```\nb\n"
    assert last_code_block("no code") is None
    assert last_code_block("```python\nprint(1)\n```\n```python\nunclosed").code == "print(1)\n"


def test_no_code_block_scores_zero_with_a_reason(env):
    reward = score(env, SUM, "print(1)")
    assert reward.value == 0 and not reward.masked and "no fenced code block" in reward.reason
    assert "not accepted" in score(env, SUM, "```java\nclass A {}\n```").reason
    assert "empty" in score(env, SUM, "```python\n\n```").reason


# ----- comparison -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("got", "want", "ok"),
    [
        ("1 2\n3\n", "1 2\n3", True),
        ("  1   2  \n3   \n\n\n", "1 2\n3\n", True),
        ("1\n\n2\n", "1\n2\n", False),  # blank lines inside the output count
        ("1.0 1e3\n", "1 1000\n", True),  # exact numeric equality
        ("0.3333333\n", "0.33333333\n", False),  # no silent float tolerance
        ("YES\n", "yes\n", False),
        ("", "\n", True),
        ("nan\n", "nan\n", True),
        ("inf\n", "1e999\n", False),
    ],
)
def test_output_comparison(got, want, ok):
    assert (compare_output(got, want) is None) is ok


def test_float_tolerance_only_when_the_task_sets_one():
    assert compare_output("0.3333333\n", "0.33333333\n", float_tolerance=1e-6) is None
    assert compare_output("0.34\n", "0.33333333\n", float_tolerance=1e-6) is not None
    assert compare_value(0.1 + 0.2, 0.3) is False and compare_value(0.1 + 0.2, 0.3, 1e-9) is True
    assert (
        compare_value([1, [2, 3]], [1, [2, 3]]) and not compare_value(1, True) and not compare_value("1", 1)
    )


# ----- Python stdin/stdout ------------------------------------------------------------------------


def test_python_verdicts(env):
    good = score(env, SUM, py("a, b = map(int, input().split())\nprint(a + b)"))
    assert good.value == 1 and good.components["tests_passed"] == 3 and good.reason == "3/3 tests passed"
    wrong = score(env, SUM, py("a, b = map(int, input().split())\nprint(a + b if a < 10**9 else 0)"))
    assert wrong.value == 0 and wrong.reason.startswith("test 3/3: wrong answer")
    assert wrong.components["tests_run"] == 3 and wrong.components["failed_test"] == 2
    crash = score(env, SUM, py("raise ValueError('boom')"))
    assert "runtime error" in crash.reason and "boom" in crash.reason and crash.components["tests_run"] == 1
    slow = score(env, SUM, py("while True: pass"))
    assert "time limit exceeded" in slow.reason
    greedy = score(env, SUM, py("x = bytearray(1 << 32)"))
    assert greedy.reason.endswith("memory limit exceeded")
    flood = score(env, SUM, py("while True: print('x' * 1000)"))
    assert "output limit exceeded" in flood.reason
    binary = score(env, SUM, py("import sys\nsys.stdout.buffer.write(bytes(range(256)))"))
    assert binary.value == 0 and "wrong answer" in binary.reason


def test_stop_at_first_failure_can_be_turned_off():
    task = row(["1\n", "2\n", "3\n"], ["1\n", "0\n", "3\n"])
    full = CodeEnv(tasks=[task], stop_at_first_failure=False, time_limit_s=2)
    reward = score(full, task, py("print(input())"))
    assert (
        reward.value == 0 and reward.components["tests_run"] == 3 and reward.components["tests_passed"] == 2
    )
    assert reward.reason.startswith("test 2/3")


def test_total_time_budget_per_response():
    task = row(["\n"] * 5, ["ok\n"] * 5, total_time_s=1.0)
    reward = score(CodeEnv(tasks=[task]), task, py("import time\ntime.sleep(0.4)\nprint('ok')"))
    assert reward.value == 0 and ("budget" in reward.reason or "time limit" in reward.reason)
    assert reward.components["tests_passed"] <= 3


def test_task_limits_override_the_env_defaults():
    task = row(["\n"], ["ok\n"], time_limit_s=0.3)
    reward = score(CodeEnv(tasks=[task], time_limit_s=5), task, py("import time\ntime.sleep(3)\nprint('ok')"))
    assert "time limit exceeded" in reward.reason


# ----- C++ -------------------------------------------------------------------------------------

CPP_SUM = '#include <bits/stdc++.h>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}'


@pytest.mark.slow
def test_cpp_compiles_once_and_runs(env):
    assert score(env, SUM, cpp(CPP_SUM)).value == 1
    overflow = score(env, SUM, cpp(CPP_SUM.replace("long long", "int")))
    assert overflow.value == 0 and overflow.reason.startswith("test 3/3: wrong answer")
    compiled = len(env.judge._binaries)
    assert score(env, SUM, cpp(CPP_SUM)).value == 1 and len(env.judge._binaries) == compiled  # cache hit
    error = score(env, SUM, cpp("int main( { return 0; }"))
    assert error.value == 0 and error.reason.startswith("compile error") and not error.masked
    segv = score(env, SUM, cpp("int main(){ volatile int *p = nullptr; return *p; }"))
    assert "runtime error" in segv.reason and "SIGSEGV" in segv.reason


def test_a_compiler_that_hangs_is_stopped():
    judge = Judge(config=JudgeConfig(compile_timeout_s=2, compile_memory_mb=256))
    task = parse_code_task(SUM)
    reward = asyncio.run(judge.ascore(task, cpp('#include "/dev/zero"\nint main(){}')))
    assert reward.value == 0 and not reward.masked and "compile" in reward.reason


def test_identical_sources_compile_once_when_judged_concurrently(env):
    source = CPP_SUM + "\n// variant for the concurrency test"
    before = len(env.judge._binaries)

    async def go():
        return await asyncio.gather(*(env.areward(SUM, cpp(source)) for _ in range(4)))

    assert [r.value for r in asyncio.run(go())] == [1.0] * 4
    assert len(env.judge._binaries) == before + 1


# ----- function calls (LeetCode style) ---------------------------------------------------------

TWO_SUM = row(
    ["[2, 7, 11, 15]\n9", "[3, 2, 4]\n6", "[3, 3]\n6"], ["[0, 1]", "[1, 2]", "[0, 1]"], fn_name="twoSum"
)


def test_function_call_tests(env):
    good = (
        "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
        "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return (seen[target - x], i)\n            seen[x] = i\n"
    )
    assert score(env, TWO_SUM, py(good)).value == 1  # a tuple is a list
    plain = "def twoSum(nums, target):\n    print('debug output is ignored')\n    return [0, 1]"
    reward = score(env, TWO_SUM, py(plain))
    assert reward.value == 0 and "returned [0, 1], expected [1, 2]" in reward.reason
    assert "no function named" in score(env, TWO_SUM, py("def other(): pass")).reason
    assert "returned no result" in score(env, TWO_SUM, py("import os\ndef twoSum(a, b): os._exit(0)")).reason


# ----- checkers ----------------------------------------------------------------------------------

CHECKER = """import sys
inp, out, ans = (open(p).read() for p in sys.argv[1:4])
n, s = map(int, inp.split()[:2]); a = list(map(int, inp.split()[2:]))
toks = out.split()
if ans.strip() == "-1":
    sys.exit(0 if toks == ["-1"] else 1)
if len(toks) != 2: print("expected two indices", file=sys.stderr); sys.exit(2)
i, j = map(int, toks)
sys.exit(0 if 1 <= i < j <= n and a[i-1] + a[j-1] == s else 1)
"""
PAIR = row(
    ["4 5\n1 4 2 3\n", "2 9\n1 2\n"], ["1 2\n", "-1\n"], checker={"language": "python", "source": CHECKER}
)


def test_checker_accepts_any_valid_answer(env):
    other_pair = (
        "n, s = map(int, input().split()); a = list(map(int, input().split()))\n"
        "r = [f'{i+1} {j+1}' for i in range(n) for j in range(i+1, n) if a[i]+a[j] == s]\n"
        "print(r[-1] if r else -1)"
    )
    assert score(env, PAIR, py(other_pair)).value == 1  # "3 4", not the reference's "1 2"
    wrong = score(env, PAIR, py("print('1 3')"))
    assert wrong.value == 0 and "wrong answer (checker)" in wrong.reason
    assert "presentation error" in score(env, PAIR, py("print(1)")).reason


def test_a_failing_checker_masks_the_reward(env):
    broken = row(["1\n"], ["1\n"], checker={"language": "python", "source": "import sys\nsys.exit(3)"})
    reward = score(env, broken, py("print(1)"))
    assert reward.masked and "checker failure" in reward.error
    uncompilable = row(["1\n"], ["1\n"], checker={"language": "cpp", "source": "int main( {"})
    assert score(env, uncompilable, py("print(1)")).masked


def test_cpp_checker():
    source = (
        "#include <bits/stdc++.h>\nint main(int c, char** v){std::ifstream o(v[2]), a(v[3]);"
        "long long x, y; o >> x; a >> y; return std::llabs(x - y) <= 1 ? 0 : 1;}"
    )
    task = row(["5\n"], ["5\n"], checker={"language": "cpp", "source": source})
    env = CodeEnv(tasks=[task])
    assert score(env, task, py("print(6)")).value == 1 and score(env, task, py("print(7)")).value == 0


# ----- bad tasks ---------------------------------------------------------------------------------


def test_zero_tests_is_a_masked_error_never_a_pass(env):
    reward = score(env, row([], []), py("print(1)"))
    assert reward.masked and reward.value == 0 and "no tests" in reward.error


def test_packed_unit_tests_are_read():
    import base64
    import zlib

    packed = base64.b64encode(
        zlib.compress(json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]}).encode())
    ).decode()
    task = {"prompt": "echo", "verifier_metadata": {"unit_tests": {"packed": packed, "fn_name": None}}}
    assert parse_code_task(task).inputs == ("1\n",)


def test_a_dead_sandbox_gives_a_masked_reward():
    from cascade_envs.sandbox import get_sandbox

    env = CodeEnv(tasks=[SUM], sandbox=get_sandbox("unsafe-subprocess", python="/nonexistent/python3"))
    reward = score(env, SUM, py("print(3)"))
    assert reward.masked and "sandbox" in reward.error


def test_one_env_serves_concurrent_episodes_with_one_judge_and_closes_its_client():
    """An env lives for a run: every episode uses its judge (one concurrency bound, one compile cache)."""
    import asyncio

    env = CodeEnv(tasks=[TASK_FOR_SHARING], verifier_url="http://127.0.0.1:9")

    async def play():
        episodes = [await env.astart(env.load(TASK_FOR_SHARING)) for _ in range(3)]
        return {id(env.judge) for _ in episodes}, env.client

    judges, client = asyncio.run(play())
    assert len(judges) == 1 and client is not None
    env.close()
    assert env.client is None


TASK_FOR_SHARING = {
    "prompt": "add",
    "verifier_metadata": {"unit_tests": {"inputs": ["1\n"], "outputs": ["1\n"]}},
}


# ----- a wrong answer stays a plain 0: nothing the program does masks it --------------------------

FLOAT_TASK = row(["\n"], ["0.5\n"], float_tolerance=1e-6)
FLOAT_FN = row(["1"], ["0.5"], fn_name="half", float_tolerance=1e-6)
MARKER = "\\x1e__cascade_result__\\x1e"


def plain_zero(reward):
    return reward.value == 0 and not reward.masked and reward.error is None


@pytest.mark.parametrize(
    "printed",
    ["1e999999999", "-1e999999999", "1e-999999999", "1e99999999999999999999", "9" * 5000, "0.5e999999999"],
)
def test_numbers_beyond_any_range_are_wrong_answers(env, printed):
    reward = score(env, FLOAT_TASK, py(f"print({printed!r})"))
    assert plain_zero(reward) and "wrong answer" in reward.reason, reward


@pytest.mark.parametrize(
    "result",
    [
        "10 ** 4000",  # an int no float can hold
        f"os.write(1, b'{MARKER}\\n' + b'[' * 100000 + b']' * 100000 + b'\\n') and os._exit(0)",  # nesting
        f"os.write(1, b'{MARKER}\\n' + b'9' * 100000 + b'\\n') and os._exit(0)",  # an int too long to read
    ],
)
def test_function_results_that_cannot_be_compared_are_wrong_answers(env, result):
    reward = score(
        env, FLOAT_FN, py(f"import os, sys\nsys.set_int_max_str_digits(0)\ndef half(x):\n    return {result}")
    )
    assert plain_zero(reward) and ("wrong answer" in reward.reason or "JSON" in reward.reason), reward


KILL_THE_AGENT = {
    "kill -9 parent": "os.kill(os.getppid(), 9)",
    "killpg parent": "os.killpg(os.getpgid(os.getppid()), 9)",
    "SIGINT parent": "os.kill(os.getppid(), signal.SIGINT)",
}


@pytest.mark.parametrize("backend", ["bwrap", "local", "docker", "unsafe-subprocess"])
@pytest.mark.parametrize("how", sorted(KILL_THE_AGENT))
def test_killing_the_sandbox_agent_is_a_plain_zero(backend, how):
    if backend == "docker":
        from tests.sandbox.conftest import backend_or_skip

        backend_or_skip(backend)
    env = CodeEnv(tasks=[SUM], sandbox=backend, time_limit_s=2)
    code = f"import os, signal\ntry:\n    {KILL_THE_AGENT[how]}\nexcept OSError:\n    pass\nprint(0)"
    reward = score(env, SUM, py(code))
    assert plain_zero(reward), reward


def test_without_bubblewrap_the_env_refuses_up_front_with_one_line(monkeypatch, tmp_path):
    from cascade_envs.sandbox import SandboxError

    monkeypatch.setenv("PATH", str(tmp_path))  # bubblewrap missing, as after a plain `pip install`
    with pytest.raises(SandboxError) as info:
        CodeEnv(tasks=[SUM])
    assert "\n" not in str(info.value) and "bubblewrap" in str(info.value) and "'local'" in str(info.value)
    named = CodeEnv(tasks=[SUM], sandbox="local", time_limit_s=2)  # a weaker backend, named: allowed
    assert score(named, SUM, py("a, b = map(int, input().split())\nprint(a + b)")).value == 1
