"""Trainer ranks on Ray (``trainer/ray_ranks.py``): 2 CPU ranks (gloo) launched as Ray actors give the
same FSDP2 step as torchrun; a rank that dies stops the run with one line naming it, never a hang."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests import ray_local

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cascade-envs[ray]')")
from cascade_envs.trainer.ray_ranks import RankFailed, launch_ranks, rank_environments  # noqa: E402
from cascade_envs.trainer.weight_sync import free_port  # noqa: E402

local_ray = ray_local.local_ray
pytestmark = pytest.mark.xdist_group("host-shared-memory")
ROOT = Path(__file__).resolve().parents[2]
ENTRY = "tests.trainer.fsdp_entry"


def torchrun(out: Path) -> dict[str, torch.Tensor]:
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    port = str(free_port()[1])
    command = [str(torchrun), "--nproc-per-node", "2", "--master-port", port, "-m", ENTRY, str(out)]
    subprocess.run(command, cwd=ROOT, env=env, check=True, timeout=300, capture_output=True)
    return torch.load(out)


def test_two_ray_ranks_train_like_torchrun(local_ray, tmp_path):
    expected = torchrun(tmp_path / "torchrun.pt")
    results = launch_ranks(f"{ENTRY}:train", 2, num_cpus=1, address=None, timeout_s=300)
    assert results[1] is None and results[0].keys() == expected.keys()
    for name, tensor in expected.items():  # same ranks, same slices, same gloo reductions: bit-exact
        assert torch.equal(results[0][name], tensor), name
    # the module form (python -m, argv) runs the same entry and reports exit codes
    assert launch_ranks(ENTRY, 2, [str(tmp_path / "ray.pt")], address=None, timeout_s=300) == [0, 0]
    assert all(torch.equal(t, expected[n]) for n, t in torch.load(tmp_path / "ray.pt").items())


def test_a_rank_that_dies_stops_the_run_with_one_line(local_ray):
    with pytest.raises(
        RankFailed, match=r"trainer rank 1 \(.*pid \d+\) died during run: .*all ranks stopped"
    ) as info:
        launch_ranks(f"{ENTRY}:train", 2, address=None, env={"FAIL_RANK": "1"}, timeout_s=300)
    assert "\n" not in str(info.value)
    deadline = time.monotonic() + 60  # the survivor was killed and the bundles freed (asynchronously)
    while ray.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == 2


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
