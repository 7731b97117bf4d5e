"""Starting a sharded run: ``cascade-envs train --nproc N`` runs torchrun, whose workers run ``run_rank``.

``run_rank(config)`` is the per-rank entry point, and its name and signature are stable: torchrun's
workers run the same ``cascade-envs train`` command line, which calls it when ``RANK`` is set, and
a Ray trainer worker calls it after setting ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``
and ``MASTER_PORT`` (one worker per rank, in a placement group).

torchrun runs with ``--max-restarts 0``: when a rank dies, torchrun stops the others and ``launch``
prints one line naming the last good checkpoint (rerunning the same command resumes from it). A
torchrun worker that trained to the end leaves through ``exit_torchrun_worker``.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .. import checkpoint as ckpt
from ..config import Config, ConfigError
from ..stopping import STOP_FILE_ENV, STOPPED_EXIT_CODE, sigterm_requests_stop


def run_rank(config: Config, source: str = "a config") -> list[dict[str, Any]]:
    """Train ``config`` as this process's rank of a sharded run; returns the run's metrics history.

    Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` (torchrun sets
    them; a Ray worker must), joins the process group (NCCL on GPU, gloo on CPU; every collective
    bounded by ``train.collective_timeout_s``), trains to ``train.steps`` and leaves the group. Rank 0
    prints the run's summary. A failure raises ``CascadeError`` with one line that names the last
    good checkpoint. ``WORLD_SIZE`` must equal ``train.world_size``.
    """
    import torch.distributed as dist

    from .ranks import RankEnv, RankError, Ranks, init_process_group
    from .trainer import ShardedTrainer

    env = RankEnv.from_environ()
    if env.world_size != config.train.world_size:
        raise ConfigError(
            f"WORLD_SIZE is {env.world_size} but train.world_size is {config.train.world_size}; start "
            f"{config.train.world_size} ranks or set train.world_size={env.world_size}"
        )
    init_process_group(env, config.train.collective_timeout_s)
    trainer = None
    try:
        ranks = Ranks(config.train.collective_timeout_s)
        if ranks.is_main:
            print(
                f"cascade-envs train: {config.name} from {source} on {env.world_size} ranks", file=sys.stderr
            )
        trainer = ShardedTrainer(config, ranks)
        if ranks.is_main and trainer.resumed_from is not None:
            print(f"resumed from step {trainer.step} ({trainer.resumed_from})", file=sys.stderr)
        try:
            history = trainer.train()
        finally:
            trainer.close()
        if ranks.is_main:
            _summary(trainer, history)
        return history
    except RankError as exc:
        raise RankError(f"{exc}; {_last_good(config)}") from exc
    finally:
        dist.destroy_process_group()


def exit_torchrun_worker(code: int) -> None:
    """End this torchrun worker's process with ``code`` now, skipping interpreter finalization; returns
    at once in any other process (a Ray rank's actor, a plain run).

    The process group outlives ``destroy_process_group``: FSDP2's device mesh stays referenced from
    DTensor's caches, so gloo's threads are only torn down while the interpreter finalizes, and one that
    still releases a tensor then needs the GIL and aborts the process (SIGABRT, "terminate called
    without an active exception") after a run that succeeded. The ``atexit`` handlers run first (logging
    flushed, Ray disconnected) and stdio is flushed; the trainer has closed every file it wrote.
    """
    if "TORCHELASTIC_RUN_ID" not in os.environ:  # torchrun sets it for its workers
        return
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _last_good(config: Config) -> str:
    latest = ckpt.latest_checkpoint(config.train.output_dir)
    if latest is None:
        return "no checkpoint was written yet"
    return f"the last good checkpoint is {latest} (run the same command again to resume from it)"


def _summary(trainer: Any, history: list[dict[str, Any]]) -> None:
    from ..metrics import reward_table

    print(reward_table(history))
    print(f"metrics: {trainer.logger.path}")
    if trainer.last_checkpoint:
        print(f"checkpoint: {trainer.last_checkpoint}")


WORKER = "cascade_envs.cli"
"""The module each rank runs (``python -m WORKER train CONFIG --set ...``)."""


def torchrun_command(
    nproc: int, config_path: str | None, overrides: list[str], worker: str = WORKER
) -> list[str]:
    """The torchrun command line of a sharded run on this machine (``worker``: the module each rank runs)."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "--max-restarts=0",
        "-m",
        worker,
        "train",
    ]
    if config_path is not None:
        command.append(config_path)
    for text in overrides:
        command += ["--set", text]
    return command


def launch(config: Config, config_path: str | None, overrides: list[str], worker: str = WORKER) -> int:
    """Run ``train.world_size`` ranks with torchrun and wait; returns its exit code.

    SIGTERM here reaches the ranks through their stop file, not torchrun (which would kill them and
    report a failure): they finish the step, checkpoint and exit 0, and this returns ``STOPPED_EXIT_CODE``.
    """
    command = torchrun_command(config.train.world_size, config_path, overrides, worker)
    env = {**os.environ}
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // config.train.world_size)))
    with tempfile.TemporaryDirectory(prefix="cascade-envs-stop-") as folder:
        stop_file = Path(folder) / "stop"
        env[STOP_FILE_ENV] = str(stop_file)
        with sigterm_requests_stop(on_signal=stop_file.touch):
            code = subprocess.Popen(command, env=env).wait()
        stopped = stop_file.exists()
    if stopped:
        how = "" if code == 0 else f" (torchrun exit code {code}: it was sent SIGTERM too, or a rank failed)"
        print(f"cascade-envs train: stopped by SIGTERM{how}; {_last_good(config)}", file=sys.stderr)
        return STOPPED_EXIT_CODE
    if code != 0:
        print(
            f"cascade-envs train: a rank failed (torchrun exit code {code}, its error is above); training "
            f"stopped, {_last_good(config)}",
            file=sys.stderr,
        )
    return code
