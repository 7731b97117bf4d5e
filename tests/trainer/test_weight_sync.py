"""The weight sync's gather (``trainer/weight_sync.py``) from a model sharded with FSDP2 on 2 gloo ranks:
rank 0 gets every parameter whole, equal to the unsharded model's, in several buckets that never mix
dtypes; the other rank keeps nothing. Plus the bucket split and flat-tensor round trip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cascade_envs.trainer.weight_sync import BucketMeta, flatten, free_port, gathered_buckets
from tests.trainer.toys import tiny_model

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.xdist_group("torchrun")


def test_rank_zero_gathers_the_sharded_model_whole(tmp_path):
    out = str(tmp_path / "gathered.pt")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    port = str(free_port()[1])
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={port}"]
    done = subprocess.run(
        [*command, "-m", "tests.trainer.sharded_gather_worker", out],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = torch.load(out)
    expected = dict(tiny_model(20, seed=0).named_parameters())
    assert got["sharded"] == len(expected) and got["buckets"] > 3
    assert got["tensors"].keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(got["tensors"][name], tensor.detach()), name
    assert torch.load(out + ".rank1") == {"kept": 0}


def test_buckets_are_bounded_and_never_mix_dtypes():
    model = tiny_model(20, seed=0)
    model.lm_head.to(torch.bfloat16)  # tied to the embedding: both become bf16
    model.model.norm.to(torch.float64)
    buckets = list(gathered_buckets(model, 0.002, keep=True))
    assert all(len({t.dtype for _, t in bucket}) == 1 for bucket in buckets)
    for bucket in buckets:  # a bucket closes once it reaches the bound
        sizes = [t.numel() * t.element_size() for _, t in bucket]
        assert sum(sizes[:-1]) < 0.002 * 2**20
    assert [n for b in buckets for n, _ in b] == [n for n, _ in model.named_parameters()]


def test_a_flat_bucket_splits_back_into_its_tensors():
    bucket = [("a", torch.arange(6.0).view(2, 3)), ("b", torch.ones(4)), ("c", torch.zeros(1, 1, 2))]
    meta = BucketMeta.of(bucket)
    flat = flatten(bucket, torch.device("cpu"))
    assert meta.numel == flat.numel() == 12
    for (name, tensor), (got_name, got) in zip(bucket, meta.split(flat), strict=True):
        assert name == got_name and torch.equal(tensor, got)
