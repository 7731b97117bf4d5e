"""``cascade-envs train [CONFIG] [--set key.sub=value ...] [--from-stage NAME]``: one run or a pipeline.

``CONFIG`` is a YAML file or the name of a shipped config (``trainer/configs/NAME.yaml``, e.g.
``if_rl`` or ``cascade_demo``); none: the embedded default run. A file with a top-level
``stages:`` list is a Cascade RL pipeline (``cascade.py``); any other is a single-stage config.
"""

from __future__ import annotations

import logging
import os
import sys

from .._extras import require


def _setup() -> None:
    require("torch", "training")
    require("transformers", "training")
    from transformers.utils import logging as hf_logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    hf_logging.disable_progress_bar()  # weight loading/saving bars would break up the step bar


def train_main(
    config_path: str | None, overrides: list[str], from_stage: str | None = None, nproc: int | None = None
) -> int:
    """Train with ``config_path`` (``None``: the embedded default run); returns the exit code.

    ``nproc`` (``--nproc``) sets ``train.world_size`` and starts that many ranks with torchrun (or
    Ray workers, ``train.launcher: ray``), each sharding the model with FSDP2 (``trainer/parallel``);
    ``--nproc 1`` is one such rank (e.g. for ``train.cpu_offload``). Without it, ``train.world_size``
    above 1 does the same, and 1 is a single plain process. A process that torchrun or a Ray worker
    started (``RANK`` set) runs as its rank, at any world size.

    Errors the user can fix are raised as ``CascadeError`` (the CLI prints them on one line); every
    setting is checked (``ConfigError`` naming the key) before the model is loaded. A run stopped by
    SIGTERM after its checkpoint (``stopping.py``) says so and returns ``STOPPED_EXIT_CODE``.
    """
    from .stopping import STOPPED_EXIT_CODE, TrainingStopped

    try:
        return _train(config_path, overrides, from_stage, nproc)
    except TrainingStopped as stopped:
        if os.environ.get("RANK", "0") == "0":
            print(f"cascade-envs train: {stopped}", file=sys.stderr)
        if "RANK" in os.environ:  # a rank: its launcher reports the stop (torchrun sees a clean exit)
            from .parallel.launch import exit_torchrun_worker

            exit_torchrun_worker(0)
        return STOPPED_EXIT_CODE


def _train(config_path: str | None, overrides: list[str], from_stage: str | None, nproc: int | None) -> int:
    _setup()
    from .cascade import find_config, is_pipeline_file
    from .cascade_run import run_pipeline
    from .checks import load_config
    from .config import ConfigError
    from .run import run_training

    path = find_config(config_path) if config_path is not None else None
    pipeline = path is not None and is_pipeline_file(path)
    if nproc is not None:
        if pipeline:
            raise ConfigError("--nproc applies to a single-stage config, not a pipeline file")
        overrides = [*overrides, f"train.world_size={nproc}"]
    if from_stage is not None and not pipeline:
        raise ConfigError("--from-stage applies to a pipeline file (one with a top-level 'stages:' list)")
    if pipeline:
        assert path is not None
        print(f"cascade-envs train: pipeline {path}", file=sys.stderr)
        run_pipeline(path, overrides, from_stage)
        return 0
    config = load_config(path, overrides)
    source = str(path) if path else "the embedded default config"
    if "RANK" in os.environ:  # a rank that torchrun (started by launch) or a Ray worker runs
        from .parallel.launch import exit_torchrun_worker, run_rank

        run_rank(config, source)
        exit_torchrun_worker(0)
        return 0
    if nproc is not None or config.train.world_size > 1:
        if config.train.launcher == "ray":
            from .ray_ranks import launch_on_ray

            return launch_on_ray(config, str(path) if path else None, overrides)
        from .parallel.launch import launch

        return launch(config, str(path) if path else None, overrides)
    run_training(config, source)
    return 0
