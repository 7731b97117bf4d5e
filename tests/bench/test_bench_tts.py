"""``bench/bench_tts.py``: its curves from scripted policies (math and code), pass@k, the plot, its flags."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from cascade_envs.envs.code.conformance import SUM
from cascade_envs.testing import ScriptedPolicy

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import bench_tts  # noqa: E402


def reply(messages) -> str:
    text = messages[-1]["content"]
    if text.startswith("Check the proposed answer"):
        return "Looks right.\nVERDICT: ACCEPT"
    if "|a|, |b| <= 10^18" in text:  # the first code task: right
        return SUM
    if "Find the remainder when" in text:  # the first math task (2^100 mod 7): right
        return "So the answer is \\boxed{2}."
    return "```python\nprint(0)\n```" if "code block" in text else "\\boxed{7}"


def test_pass_at_k_is_the_unbiased_estimate():
    assert bench_tts.pass_at_k(4, 0, 2) == 0 and bench_tts.pass_at_k(4, 4, 1) == 1
    assert bench_tts.pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert bench_tts.pass_at_k(4, 1, 2) == pytest.approx(0.5) and bench_tts.pass_at_k(4, 3, 2) == 1


def test_curves_from_a_scripted_policy_and_the_plot(tmp_path):
    args = bench_tts.parse(
        ["--tasks", "2", "--max-generations", "4", "--rounds", "3", "--plot", str(tmp_path / "t.png")]
    )
    points = asyncio.run(bench_tts.measure(ScriptedPolicy(reply), args))
    got = {(p.env, p.method, p.generations): p.score for p in points}
    for env, selector in (("math", "majority"), ("code", "reward")):
        for n in (1, 4):
            assert got[(env, f"best-of-N ({selector})", n)] == 0.5
            assert got[(env, "pass@k (repeated sampling)", n)] == 0.5
        # round 1: answer + verify (accept), round 2: verify (accept twice: stop); round 3 adds nothing
        assert got[(env, "refine (round 1)", 2)] == 0.5 and got[(env, "refine (round 2)", 3)] == 0.5
        assert got[(env, "refine (round 3)", 3)] == 0.5
    table = bench_tts.table(points)
    assert "| math | best-of-N (majority) | 4 | 0.500 | 0 |" in table
    bench_tts.plot(points, args.plot, "scripted")
    assert args.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_flags_are_refused(capsys):
    for argv, words in (
        (["--envs", "math,chess"], "--envs: unknown chess"),
        (["--tasks", "0"], "--tasks must be"),
    ):
        with pytest.raises(SystemExit):
            bench_tts.parse(argv)
        assert words in capsys.readouterr().err


def test_masked_answers_count_as_not_correct_and_say_why(tmp_path, capsys):
    args = bench_tts.parse(["--envs", "math", "--tasks", "1", "--max-generations", "1", "--rounds", "1"])
    points = asyncio.run(bench_tts.measure(ScriptedPolicy(RuntimeError("model down")), args))
    assert all(p.score == 0 for p in points) and all(p.masked == 1 for p in points)
    err = capsys.readouterr().err
    assert "math best-of-N: 1 answer(s) masked, counted as not correct: 1x policy call failed" in err
    assert "model down" in err
