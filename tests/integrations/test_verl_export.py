"""The parts of the verl integration that need no verl: the parquet export and ``compute_score``."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import pytest

from cascade_envs.cli import main
from cascade_envs.integrations.verl.export import verl_rows
from cascade_envs.integrations.verl.scoring import compute_score

pq = pytest.importorskip("pyarrow.parquet")


def test_export_cli_round_trip_without_verl(tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "mcqa.parquet"
    assert main(["export", "--format", "verl", "cascade/MCQA-v0", "-o", str(path), "--limit", "3"]) == 0
    assert "wrote 3 rows of cascade/MCQA-v0" in capsys.readouterr().out
    rows = pq.read_table(path).to_pylist()
    assert rows == verl_rows("cascade/MCQA-v0", limit=3)
    assert not any(m.startswith("verl") for m in sys.modules)
    for i, row in enumerate(rows):
        task = json.loads(row["extra_info"]["task_json"])
        assert row["data_source"] == "cascade/MCQA-v0" and row["extra_info"]["index"] == i
        assert row["reward_model"] == {"style": "rule", "ground_truth": task["expected_answer"]}
        assert row["prompt"][-1]["content"] == task["responses_create_params"]["input"][-1]["content"]


def test_export_rejects_bad_arguments(tmp_path: Any, capsys: Any) -> None:
    out = str(tmp_path / "x.parquet")
    assert main(["export", "--format", "verl", "cascade/MCQA-v0", "-o", out, "--env-kwargs", "[1]"]) == 2
    assert "--env-kwargs must be a JSON object" in capsys.readouterr().err
    assert main(["export", "--format", "verl", "nobody/Missing-v0", "-o", out]) != 0


def test_compute_score_per_sample_and_over_a_batch() -> None:
    rows = verl_rows("cascade/MCQA-v0", limit=2)
    right = [f"\\boxed{{{json.loads(r['extra_info']['task_json'])['expected_answer']}}}" for r in rows]
    one = compute_score(rows[0]["data_source"], right[0], None, rows[0]["extra_info"])
    assert one["score"] == 1.0 and one["cascade_masked"] is False
    batch = compute_score(
        data_sources=[r["data_source"] for r in rows] + ["cascade/MCQA-v0"],
        solution_strs=[*right, "x"],
        ground_truths=[None] * 3,
        extra_infos=[r["extra_info"] for r in rows] + [{"task_json": "{broken"}],
    )
    assert [b["score"] for b in batch[:2]] == [1.0, 1.0]
    assert (
        math.isnan(batch[2]["score"])
        and batch[2]["cascade_masked"]
        and "not JSON" in batch[2]["cascade_reason"]
    )
