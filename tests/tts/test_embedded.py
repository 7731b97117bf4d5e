"""End to end with the embedded SmolLM2-135M-Instruct: `cascade-envs solve` best-of-2 by majority on 2
bundled math tasks, every candidate generated, scored by math-verify and recorded."""

from __future__ import annotations

import json
import time

import pytest

from cascade_envs.cli import main


@pytest.mark.slow
def test_solve_with_the_embedded_model_on_two_math_tasks(tmp_path, capsys):
    out = tmp_path / "best.jsonl"
    argv = ["solve", "--env", "cascade/Math-v0", "--limit", "2", "--strategy", "best_of_n", "--candidates", "2",
            "--selector", "majority", "--max-tokens", "24", "--no-progress", "-o", str(out)]  # fmt: skip
    started = time.perf_counter()
    assert main(argv) == 0
    print(
        f"\nsolve with the embedded model: {time.perf_counter() - started:.1f} s"
    )  # ~20-50 s on 2 busy cores
    summary = capsys.readouterr().out
    assert "tasks 2: selected score" in summary and "generations 4, rounds 2" in summary

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    outcomes = [r for r in rows if r["kind"] == "outcome"]
    candidates = [r for r in rows if r["kind"] == "attempt"]
    assert sorted(o["task_id"] for o in outcomes) == ["math-00", "math-01"] and len(candidates) == 4
    for c in candidates:
        assert c["role"] == "candidate" and c["round"] == 0 and c["completion"] and c["tokens"]
        assert c["messages"][-1] == {"role": "assistant", "content": c["completion"]}
        assert c["reward"] in (0.0, 1.0) and c["masked"] is False  # scored by the env, never masked here
    for o in outcomes:
        assert o["generations"] == 2 and o["reward"]["masked"] is False and o["pass_at_n"] in (True, False)
