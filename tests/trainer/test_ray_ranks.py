"""Trainer ranks on Ray (``trainer/ray_ranks.py``): a sharded GRPO run on 2 CPU ranks (gloo) launched as
Ray actors logs the same metrics and ends with the same weights as the same run under torchrun; a rank
that dies stops the run with one line naming it and the last good checkpoint, never a hang; the driver's
stop request stops every rank after the same step, with its checkpoint."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from cascade_envs.trainer import checkpoint as ckpt
from cascade_envs.trainer.checks import config_from_dict
from cascade_envs.trainer.parallel.launch import launch
from cascade_envs.trainer.stopping import STOP_FILE_ENV, STOPPED_EXIT_CODE
from tests import ray_local
from tests.trainer.test_parallel import config_data
from tests.trainer.toys import save_tiny

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cascade-envs[ray]')")
from cascade_envs.trainer.ray_ranks import RankFailed, launch_on_ray, launch_ranks, rank_environments  # noqa: E402

local_ray = ray_local.local_ray
pytestmark = pytest.mark.xdist_group("torchrun")  # each launch takes both cores
ROOT = Path(__file__).resolve().parents[2]
WORKER = (
    "tests.trainer.parallel_worker"  # the cascade-envs CLI with the toy envs registered (and a kill switch)
)
NOISE = ("time/", "throughput/")


@pytest.fixture(autouse=True)
def _worker_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def write_config(model: Path, out: Path, **train: Any) -> tuple[dict[str, Any], Path]:
    data = config_data(model, out, train={**config_data(model, out)["train"], "steps": 2, **train})
    out.mkdir(parents=True)
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return data, path


def history(out: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(NOISE)} for r in rows]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    latest = ckpt.latest_checkpoint(out)
    assert latest is not None
    return load_file(str(next(latest.glob("*.safetensors"))))


def test_two_ray_ranks_train_like_torchrun(local_ray, tmp_path):
    model = save_tiny(tmp_path / "model")
    data, path = write_config(model, tmp_path / "torchrun")
    assert launch(config_from_dict(data), str(path), [], worker=WORKER) == 0
    data_ray, path_ray = write_config(model, tmp_path / "ray", launcher="ray")
    assert launch_on_ray(config_from_dict(data_ray), str(path_ray), [], worker=WORKER) == 0
    assert history(tmp_path / "ray") == history(tmp_path / "torchrun")  # same rollouts, rewards, losses
    expected = final_weights(tmp_path / "torchrun")
    got = final_weights(tmp_path / "ray")
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[name], expected[name]) for name in expected)  # one machine: bit-exact


def test_a_rank_that_dies_stops_the_run_with_one_line(local_ray, tmp_path, capsys):
    model = save_tiny(tmp_path / "model")
    data, path = write_config(model, tmp_path / "run", launcher="ray")
    kill = {"TEST_KILL_AT": "1:2"}  # rank 1 is SIGKILLed as it starts step 2
    code = launch_on_ray(config_from_dict(data), str(path), [], worker=WORKER, env=kill)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    last = ckpt.latest_checkpoint(tmp_path / "run")
    assert code == 1 and last is not None and last.name.endswith("000001")
    assert (
        "trainer rank 1 (" in err
        and "died during run" in err
        and f"the last good checkpoint is {last}" in err
    )
    deadline = time.monotonic() + 60  # the surviving rank was killed and the bundles freed (asynchronously)
    while ray.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == 2


def test_a_stop_request_of_the_driver_stops_every_rank_after_a_checkpointed_step(
    local_ray, tmp_path, monkeypatch
):
    """The driver's stop request (what its SIGTERM sets; here its stop file, which the ranks cannot see)
    reaches the ranks through the run's flag actor: both stop after the same step, with its checkpoint."""
    model = save_tiny(tmp_path / "model")
    out = tmp_path / "run"
    data, path = write_config(model, out, launcher="ray", steps=40, save_every=100)
    stop_file = tmp_path / "stop"
    monkeypatch.setenv(STOP_FILE_ENV, str(stop_file))

    def request_after_the_first_step() -> None:
        deadline = time.monotonic() + 300
        while not (out / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        stop_file.touch()

    requester = threading.Thread(target=request_after_the_first_step, daemon=True)
    requester.start()
    code = launch_on_ray(config_from_dict(data), str(path), [], worker=WORKER)
    requester.join(10)
    steps = [h["step"] for h in history(out)]
    assert code == STOPPED_EXIT_CODE and steps == list(range(1, steps[-1] + 1)) and steps[-1] < 40
    assert [p.name for p in ckpt.list_checkpoints(out)] == [f"step_{steps[-1]:06d}"]  # save_every is 100


def test_an_entry_that_raises_names_the_rank(local_ray):
    with pytest.raises(
        RankFailed,
        match=r"trainer rank [01] .*failed during run: ModuleNotFoundError: No module named .tests.trainer.no_such_entry.; all ranks stopped",
    ):
        launch_ranks("tests.trainer.no_such_entry:main", 2, address=None, timeout_s=120)


def test_the_ranks_get_torchruns_variables():
    infos = [{"node": "a", "gpus": ["2"]}, {"node": "a", "gpus": ["5"]}, {"node": "b", "gpus": ["0"]}]
    envs = rank_environments(infos, ("10.0.0.1", 29500), gpus=True)
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0"]
    assert [e["LOCAL_WORLD_SIZE"] for e in envs] == ["2", "2", "1"]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["2,5", "2,5", "0"]
    assert {e["MASTER_ADDR"] + ":" + e["MASTER_PORT"] for e in envs} == {"10.0.0.1:29500"}
    assert [e["RANK"] for e in envs] == ["0", "1", "2"] and envs[0]["WORLD_SIZE"] == "3"
    assert "CUDA_VISIBLE_DEVICES" not in rank_environments(infos, ("h", 1), gpus=False)[0]


def test_sharded_ranks_feed_ray_engines_without_a_rollout_copy(local_ray, tmp_path):
    """Two torchrun ranks (separate Ray drivers) share the engine actors rank 0 started and gather their
    shards straight into them (no full copy per rank): every step the engines sample with the weights
    being trained (their logprobs are the trainer's), and the consolidated checkpoint equals the shards."""
    from transformers import AutoModelForCausalLM

    from cascade_envs.trainer.parallel.dcp import load_unsharded

    model = save_tiny(tmp_path / "model")
    out = tmp_path / "run"
    engine = {"num_cpus": 0.5, "threads": 1, "address": local_ray.get_runtime_context().gcs_address}
    data = config_data(model, out, rollout={"engine": "ray", "engine_kwargs": {**engine, "bucket_mb": 0.01}})
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    assert launch(config_from_dict(data), str(out / "config.yaml"), [], worker=WORKER) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["time/sync_s"] > 0 for r in rows)
    # An engine left on the checkpoint's weights would sample from another distribution than the one trained.
    assert all(r["train/inference_logprob_abs_diff"] < 1e-4 for r in rows), rows
    saved = final_weights(out)
    initial = AutoModelForCausalLM.from_pretrained(model).state_dict()
    assert any(not torch.equal(saved[n], initial[n]) for n in saved)  # it trained
    shards = AutoModelForCausalLM.from_pretrained(model)
    optimizer = torch.optim.AdamW(shards.parameters())
    load_unsharded(ckpt.latest_checkpoint(out) / ckpt.SHARDED_DIR, shards, optimizer)
    assert all(torch.equal(saved[n], t) for n, t in shards.state_dict().items() if n in saved)
