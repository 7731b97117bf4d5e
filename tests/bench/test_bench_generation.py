"""Smoke tests of ``bench/bench_generation.py``: a real run on a tiny random Llama, and its input checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from bench_generation import count_tokens  # noqa: E402


def run_bench(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH / "bench_generation.py"), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_count_tokens_stops_at_the_first_end_token_and_keeps_it():
    assert count_tokens([[5, 6, 2, 2, 2], [5, 6, 7, 8, 9], [3, 5]], end_ids={2, 3}) == 3 + 5 + 1


def test_unknown_variant_is_a_one_line_error():
    proc = run_bench("--variants", "generate,warp-drive", timeout=120)
    assert proc.returncode == 2
    assert "--variants: unknown warp-drive" in proc.stderr


@pytest.mark.slow
def test_tiny_run_reports_every_variant(tmp_path):
    out = tmp_path / "result.json"
    proc = run_bench(
        "--model",
        "tiny",
        "--prompts",
        "2",
        "--group",
        "2",
        "--max-tokens",
        "6",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--variants",
        "ours-generate,vllm",
        "--vllm-python",
        str(tmp_path / "no-python"),
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    assert list(results) == ["generate", "ours-generate", "vllm"]  # the baseline is always run first
    for name in ("generate", "ours-generate"):
        r = results[name]
        assert 0 < r["tokens"] <= 2 * 2 * 6  # prompts x group x max tokens
        assert r["round_s"] > 0 and r["ms_per_token"] == pytest.approx(1e3 * r["round_s"] / r["tokens"])
        assert len(r["rounds"]) == 2 and r["cpu_per_wall"] > 0  # warm-up + 1 timed round
        assert 100 < r["peak_rss_mb"] < 4000  # its own process's peak, not the parent's
    assert "no vLLM python" in results["vllm"]["skipped"]
    table = proc.stdout
    assert "generate" in table and "1.00" in table and "skipped: no vLLM python" in table
