"""Sharded data-parallel training on 2 gloo ranks (torchrun subprocesses, the tiny model): one GRPO and
one MOPD step equal one process's on the same batch, checkpoints resume across world sizes and
bit-for-bit at the same one, and bad input (a killed rank, disagreeing ranks, too many ranks) stops
with one line. Nothing here may skip: torchrun and gloo ship with torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from cascade_envs.trainer import checkpoint as ckpt
from cascade_envs.trainer.checks import config_from_dict
from cascade_envs.trainer.config import ConfigError
from cascade_envs.trainer.loop import Trainer
from cascade_envs.trainer.parallel.launch import launch
from tests.trainer.parallel_worker import fixed_batch
from tests.trainer.toys import save_tiny

pytestmark = pytest.mark.xdist_group("torchrun")  # one xdist worker runs them: each launch takes both cores

ROOT = Path(__file__).resolve().parents[2]
WORKER = "tests.trainer.parallel_worker"
NOISE = ("time/", "throughput/", "train/padded_tokens", "train/packed_tokens")
"""Keys that differ by design: timings, and the layout tokens (each rank packs or pads its own slice;
the sum over ranks is logged)."""
WEIGHT_ATOL = 1e-6
"""Largest |difference| allowed between the weights after one step on 2 ranks and on 1 process (lr 3e-3:
the step moves a weight by up to 3e-3, so this is agreement to 1/3000 of the step; measured: 2.2e-7
GRPO, 0 MOPD, 3.0e-7 for 3 groups on 2 ranks). Not bit-equal: the ranks
add the gradients in another order, and FSDP runs one forward per micro-batch where one process
shares a group's prompt cache, so float32 rounding differs."""
METRIC_RTOL = 1e-5


@pytest.fixture(autouse=True)
def _worker_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model")


def config_data(model: Path, out: Path, **sections: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model": {"path": str(model)},
        "mix": {"envs": {"test/SayYes-v0": 1.0}},
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_tokens": 6},
        "optim": {"lr": 3e-3, "micro_batch_size": 4},
        "train": {
            "steps": 3,
            "output_dir": str(out),
            "save_every": 1,
            "tensorboard": False,
            "progress": False,
            "plot": False,
            "world_size": 2,
            "collective_timeout_s": 60,
        },
    }
    for name, values in sections.items():
        data[name] = {**data[name], **values} if isinstance(values, dict) and name in data else values
    return data


def run_ranks(data: dict[str, Any], folder: Path) -> tuple[int, float]:
    """``launch`` (what ``cascade-envs train --nproc 2`` runs) on the config; exit code and seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    start = time.monotonic()
    code = launch(config_from_dict(data), str(path), [], worker=WORKER)
    return code, time.monotonic() - start


def history(out: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(NOISE)} for r in rows]


def close(a: dict[str, Any], b: dict[str, Any]) -> None:
    a = {k: v for k, v in a.items() if not k.startswith(NOISE)}
    b = {k: v for k, v in b.items() if not k.startswith(NOISE)}
    assert a.keys() == b.keys()
    for key, value in a.items():
        assert value == pytest.approx(b[key], rel=METRIC_RTOL, abs=1e-7, nan_ok=True), key


def test_one_step_on_two_ranks_equals_one_process(model_dir, tmp_path):
    """GRPO, MOPD (eq. 4), and 3 groups on 2 ranks (uneven slices): same weights and metrics as one process;
    ranks given different configs stop with one line naming the keys; a collective a rank does not
    answer fails at its timeout with one line."""
    teacher = save_tiny(tmp_path / "teacher", seed=2)
    mopd = {
        "algorithm": "mopd",
        "mopd": {"teachers": {"test/SayYes-v0": str(teacher)}},
        "rollout": {"group_size": 1, "prompts_per_step": 4, "max_tokens": 6},
    }
    cases = [
        {
            "name": "grpo",
            "data": config_data(model_dir, tmp_path / "g"),
            "batch": {"groups": 4, "group_size": 4, "seed": 1},
        },
        {
            "name": "mopd",
            "data": config_data(model_dir, tmp_path / "m", **mopd),
            "batch": {"groups": 8, "group_size": 1, "seed": 2},
        },
        {
            "name": "uneven",
            "data": config_data(model_dir, tmp_path / "u", rollout={"prompts_per_step": 3}),
            "batch": {"groups": 3, "group_size": 4, "seed": 3},
        },
    ]
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps([{"name": c["name"], "config": c["data"], "batch": c["batch"]} for c in cases])
    )
    out = tmp_path / "results.pt"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=0",
    ]
    done = subprocess.run(
        [*command, "-m", WORKER, "--steps", str(spec), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = torch.load(out, weights_only=False)
    for case in cases:
        data = case["data"]
        data["train"] = {
            **data["train"],
            "world_size": 1,
            "output_dir": str(tmp_path / f"one_{case['name']}"),
        }
        trainer = Trainer(config_from_dict(data))
        metrics = trainer._optimize(fixed_batch(**case["batch"]), 1)
        trainer.close()
        sharded = results[case["name"]]
        close(sharded["metrics"], metrics)
        for name, tensor in trainer.model.state_dict().items():
            assert torch.allclose(sharded["weights"][name], tensor, rtol=0, atol=WEIGHT_ATOL), (
                case["name"],
                name,
            )
        assert metrics["train/grad_norm"] > 0
    assert (
        "the ranks disagree on the config: rank(s) 1 differ from rank 0 in optim.lr;" in results["disagree"]
    )
    assert (
        "rank 0: exchanging a test value failed: another rank stopped or did not answer within"
        in results["timeout"]
    )
    assert results["timeout_s"] < 6


def test_runs_resume_across_world_sizes_and_a_killed_rank_names_the_last_checkpoint(
    model_dir, tmp_path, capfd
):
    """2 ranks: two runs with the same seed log identical metrics; a rank killed at step 3 stops the run
    (no hang) naming step 2's checkpoint; resuming there at 2 ranks ends bit-for-bit where the straight
    run did; one process resumes that sharded checkpoint (2 -> 1), and 2 ranks resume one process's (1 -> 2)."""
    straight = config_data(model_dir, tmp_path / "straight")
    code, _ = run_ranks(straight, tmp_path / "a")
    assert code == 0
    killed = config_data(model_dir, tmp_path / "killed")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TEST_KILL_AT", "1:3")
        code, seconds = run_ranks(killed, tmp_path / "b")
    err = capfd.readouterr().err
    last = tmp_path / "killed" / "checkpoints" / "step_000002"
    assert code != 0 and seconds < 120
    assert f"a rank failed (torchrun exit code {code}" in err and f"the last good checkpoint is {last}" in err
    assert history(tmp_path / "killed") == history(tmp_path / "straight")[:2]  # same seed, same metrics

    code, _ = run_ranks(killed, tmp_path / "b")  # the same command again: resumes at step 2
    assert code == 0
    assert history(tmp_path / "killed") == history(tmp_path / "straight")
    final = {
        n: ckpt.checkpoint_dir(tmp_path / r) / "step_000003" for n, r in (("a", "straight"), ("b", "killed"))
    }
    for a, b in zip(sorted(final["a"].rglob("*.*")), sorted(final["b"].rglob("*.*")), strict=True):
        if a.suffix in (".safetensors", ".distcp"):
            assert a.read_bytes() == b.read_bytes(), a.name

    # 2 -> 1: one process resumes the sharded step-4 checkpoint and trains step 5
    one = config_data(
        model_dir,
        tmp_path / "killed",
        train={**straight["train"], "world_size": 1, "steps": 4, "output_dir": str(tmp_path / "killed")},
    )
    trainer = Trainer(config_from_dict(one))
    assert trainer.resumed_from == final["b"] and trainer.step == 3
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    saved = load_file(final["b"] / "model.safetensors")
    for name, tensor in trainer.model.state_dict().items():
        if name in saved:
            assert torch.equal(tensor, saved[name]), name
    dcp_to_torch_save(final["b"] / "dcp", tmp_path / "flat.pt")
    flat = torch.load(tmp_path / "flat.pt", weights_only=False)["optim"]["state"]
    names = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    state = trainer.optimizer.state_dict()["state"]
    assert len(state) == len(names)
    for i, name in enumerate(names):
        assert torch.equal(state[i]["exp_avg_sq"], flat[name]["exp_avg_sq"]), name
    assert trainer.train()[-1]["step"] == 4
    trainer.close()

    # 1 -> 2: one process trains 1 step; 2 ranks resume its checkpoint and train steps 2-3
    single = config_data(
        model_dir,
        tmp_path / "single",
        train={**straight["train"], "world_size": 1, "steps": 1, "output_dir": str(tmp_path / "single")},
    )
    Trainer(config_from_dict(single)).train()
    code, _ = run_ranks(config_data(model_dir, tmp_path / "single"), tmp_path / "c")
    assert code == 0
    assert [h["step"] for h in history(tmp_path / "single")] == [1, 2, 3]
    assert "resumed from step 1" in capfd.readouterr().err


def test_too_many_ranks_is_refused_at_config_time(model_dir, tmp_path):
    data = config_data(
        model_dir,
        tmp_path / "run",
        train={"world_size": 3, "output_dir": str(tmp_path / "run")},
        rollout={"prompts_per_step": 2},
    )
    with pytest.raises(ConfigError, match=r"train.world_size 3 is above rollout.prompts_per_step 2"):
        config_from_dict(data)


def test_a_checkpoint_of_another_model_is_refused_with_one_line(model_dir, tmp_path, monkeypatch):
    """run_rank in this process as a world of one (the entry a Ray worker calls)."""
    import socket

    from cascade_envs.trainer.parallel.launch import run_rank

    out = tmp_path / "run"
    single = config_data(model_dir, out, train={"world_size": 1, "steps": 1, "output_dir": str(out)})
    Trainer(config_from_dict(single)).train()
    other = save_tiny(tmp_path / "other", seed=5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {
        "RANK": 0,
        "WORLD_SIZE": 1,
        "LOCAL_RANK": 0,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
    }.items():
        monkeypatch.setenv(key, str(value))
    data = config_data(other, out, train={**single["train"], "steps": 2})
    with pytest.raises(
        ckpt.CheckpointError,
        match=rf"checkpoint {out}/checkpoints/step_000001 was trained from model {model_dir}, but model.path is {other}",
    ):
        run_rank(config_from_dict(data))
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize("nproc", [1, 2])
def test_nproc_sets_the_world_size_and_starts_torchrun(model_dir, tmp_path, monkeypatch, nproc):
    """``cascade-envs train CONFIG --nproc N`` launches N ranks running the same command line (one rank:
    a sharded run of one, which can use ``train.cpu_offload``)."""
    from cascade_envs.cli import main
    from cascade_envs.trainer.parallel import launch as launch_module

    calls: list[list[str]] = []

    class Torchrun:
        def __init__(self, command: list[str], **kw: Any):
            calls.append(command)

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(launch_module.subprocess, "Popen", Torchrun)
    monkeypatch.delenv("RANK", raising=False)
    data = config_data(model_dir, tmp_path / "run")
    data["train"]["world_size"] = 1
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["train", str(path), "--set", "optim.lr=0.001", "--nproc", str(nproc)]) == 0
    (command,) = calls
    assert command[1:6] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "--max-restarts=0",
    ]
    assert command[6:] == [
        "-m",
        "cascade_envs.cli",
        "train",
        str(path),
        "--set",
        "optim.lr=0.001",
        "--set",
        f"train.world_size={nproc}",
    ]


EXIT_SCRIPT = """
import atexit, os, sys
from cascade_envs.trainer.parallel.launch import exit_torchrun_worker

class Finalized:
    def __del__(self, write=os.write):
        write(2, b"finalized")

keep = Finalized()  # destroyed while the interpreter finalizes, if it does
atexit.register(lambda: open(sys.argv[1] + "/atexit", "w").close())
print("unflushed", end="")
exit_torchrun_worker(3)
sys.exit(5)
"""


@pytest.mark.parametrize("torchrun", [True, False])
def test_a_torchrun_worker_leaves_without_finalizing_the_interpreter(tmp_path, torchrun):
    """A torchrun rank that trained to the end exits before interpreter finalization (where gloo's
    threads, kept alive by DTensor's caches, can abort it), after its atexit handlers and a flush of
    stdio; any other process (a Ray rank's actor) is left to exit normally."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_RUN_ID"}
    if torchrun:
        env["TORCHELASTIC_RUN_ID"] = "test"
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout == "unflushed" and (tmp_path / "atexit").exists()
    assert done.returncode == (3 if torchrun else 5)
    assert (done.stderr == "finalized") is not torchrun
