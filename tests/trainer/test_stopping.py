"""SIGTERM (a preemption, a time limit, ``docker stop``) stops a run after the step in progress with a
checkpoint of it, and the same command resumes where it stopped: in one process, and on 2 torchrun ranks
whose launcher got the signal."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from cascade_envs.trainer import checkpoint as ckpt
from cascade_envs.trainer.loop import Trainer
from cascade_envs.trainer.stopping import STOP_FILE_ENV, STOPPED_EXIT_CODE, TrainingStopped, stop_requested
from tests.trainer.test_parallel import config_data

ROOT = Path(__file__).resolve().parents[2]
DROP = ("time/", "throughput/")


def steps_logged(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def without_timings(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if not k.startswith(DROP)} for h in history]


def test_a_stop_request_checkpoints_the_step_and_the_run_resumes_bit_for_bit(
    make_config, tmp_path, monkeypatch
):
    settings = {"steps": 4, "save_every": 100}
    straight = Trainer(make_config(train={**settings, "output_dir": str(tmp_path / "a")}))
    full = straight.train()

    stop_file = tmp_path / "stop"
    monkeypatch.setenv(STOP_FILE_ENV, str(stop_file))
    assert not stop_requested()
    stop_file.touch()  # asked before the first step: that step still runs, then the run stops
    stopped = Trainer(make_config(train={**settings, "output_dir": str(tmp_path / "b")}))
    with pytest.raises(
        TrainingStopped, match=r"stopped by SIGTERM after step 1 of 4; checkpoint .*step_000001"
    ):
        stopped.train()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "b")] == ["step_000001"]  # save_every is 100
    stopped.close()

    stop_file.unlink()
    resumed = Trainer(make_config(train={**settings, "output_dir": str(tmp_path / "b")}))
    assert resumed.step == 1
    assert without_timings(resumed.train()) == without_timings(full)
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def launch_script(data: dict, folder: Path) -> list[str]:
    """A process that runs ``launch`` (what ``cascade-envs train --nproc 2`` runs) on the config."""
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    code = (
        "import sys\n"
        "from tests.trainer.toys import register_toys\n"
        "from cascade_envs.trainer.checks import config_from_dict\n"
        "from cascade_envs.trainer.parallel.launch import launch\n"
        "import yaml\n"
        "register_toys()\n"
        f"data = yaml.safe_load(open({str(path)!r}))\n"
        f"sys.exit(launch(config_from_dict(data), {str(path)!r}, [], worker='tests.trainer.parallel_worker'))\n"
    )
    return [sys.executable, "-c", code]


def single_process(data: dict, folder: Path) -> list[str]:
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return [sys.executable, "-m", "tests.trainer.parallel_worker", "train", str(path)]


@pytest.mark.xdist_group("torchrun")  # one xdist worker runs the torchrun tests: each launch takes both cores
@pytest.mark.parametrize(
    ("world_size", "everyone"),
    [(1, False), (2, False), (2, True)],
    ids=["one-process", "ranks-via-launcher", "every-process-signalled"],
)
def test_sigterm_stops_after_the_step_with_its_checkpoint(tiny_model_dir, tmp_path, world_size, everyone):
    """``everyone``: SIGTERM goes to the launcher, torchrun and the ranks at once, as a scheduler such as
    SLURM sends it; torchrun then stops the ranks itself, which still checkpoint first."""
    out = tmp_path / "run"
    data = config_data(tiny_model_dir, out)
    data["train"].update(steps=1000, save_every=1000, world_size=world_size)
    command = launch_script(data, tmp_path) if world_size > 1 else single_process(data, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("RANK", None)
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 180
        while not steps_logged(out):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=30)
            time.sleep(0.2)
        for _ in range(3):  # a scheduler may signal more than once: a request, not a count
            if everyone:
                os.killpg(proc.pid, signal.SIGTERM)
            else:
                proc.send_signal(signal.SIGTERM)
            time.sleep(0.05)
        _, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == STOPPED_EXIT_CODE, err
    steps = steps_logged(out)
    last = steps[-1]
    assert steps == list(range(1, last + 1)) and last < 1000
    checkpoint = ckpt.checkpoint_dir(out) / f"step_{last:06d}"
    assert [p.name for p in ckpt.list_checkpoints(out)] == [checkpoint.name]
    assert f"stopped by SIGTERM after step {last} of 1000" in err
    if world_size > 1 and not everyone:
        assert f"stopped by SIGTERM; the last good checkpoint is {checkpoint}" in err
        assert "a rank failed" not in err and "ChildFailedError" not in err  # torchrun saw a clean exit
    if everyone:
        assert f"it was sent SIGTERM too, or a rank failed); the last good checkpoint is {checkpoint}" in err

    data["train"]["steps"] = last + 1  # the same run, one step more: resumes from the stop
    command = launch_script(data, tmp_path) if world_size > 1 else single_process(data, tmp_path)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"resumed from step {last}" in done.stderr
    assert steps_logged(out) == list(range(1, last + 2))
