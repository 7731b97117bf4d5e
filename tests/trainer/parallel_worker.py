"""One rank of a sharded test run, started by torchrun from ``test_parallel.py``.

``python -m tests.trainer.parallel_worker train [CONFIG] [--set K=V ...]``: the toy envs registered, then
the ``cascade-envs`` command line (what ``cascade-envs train --nproc N`` runs on each rank). Test-only switches, from the
environment: ``TEST_KILL_AT=RANK:STEP`` kills that rank (SIGKILL) as it starts that step.

``python -m tests.trainer.parallel_worker --steps SPEC OUT``: one optimizer step on each fixed batch
that ``SPEC`` (JSON: a list of ``{"name", "config", "batch"}``) describes, then a trainer whose config
differs on rank 1 and a collective that rank 1 answers too late; rank 0 writes the updated weights and
the step's metrics of each, and the errors of the last two (``disagree``, ``timeout``), to ``OUT``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from typing import Any


def fixed_batch(groups: int, group_size: int, seed: int) -> Any:
    """A reproducible batch: ``groups`` groups whose rollouts share a prompt, varied lengths and advantages,
    engine log-probs, some env tokens masked."""
    import random

    from cascade_envs.trainer.batch import RolloutBatch
    from cascade_envs.trainer.sequence import TrainSequence

    rng = random.Random(seed)
    sequences = []
    for g in range(groups):
        prompt = [1, 4] + [rng.randrange(6, 18) for _ in range(rng.randrange(2, 6))] + [2, 1, 5]
        for _ in range(group_size):
            n = rng.randrange(1, 7)
            response = [rng.randrange(6, 18) for _ in range(n)]
            mask = [1 if i % 4 != 2 else 0 for i in range(n)]
            logprobs = [-rng.uniform(0.5, 3.0) if m else 0.0 for m in mask]
            sequences.append(
                TrainSequence(prompt, response, rng.uniform(-1.5, 1.5), "test/SayYes-v0", logprobs, mask, g)
            )
    return RolloutBatch(sequences=sequences, asked=groups)


def _kill_switch() -> None:
    spec = os.environ.get("TEST_KILL_AT")
    if not spec:
        return
    rank, step = (int(x) for x in spec.split(":"))
    if int(os.environ["RANK"]) != rank:
        return
    from cascade_envs.trainer.parallel.trainer import ShardedTrainer

    original = ShardedTrainer.train_step

    def train_step(self: ShardedTrainer) -> dict[str, Any]:
        if self.step + 1 == step:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self)

    ShardedTrainer.train_step = train_step  # type: ignore[method-assign]


def run_steps(spec_path: str, out: str) -> int:
    import torch

    from cascade_envs.trainer.checks import config_from_dict
    from cascade_envs.trainer.config import ConfigError
    from cascade_envs.trainer.parallel.fsdp import full_state_dict
    from cascade_envs.trainer.parallel.launch import exit_torchrun_worker
    from cascade_envs.trainer.parallel.ranks import RankEnv, RankError, Ranks, init_process_group
    from cascade_envs.trainer.parallel.trainer import ShardedTrainer

    with open(spec_path, encoding="utf-8") as f:
        cases = json.load(f)
    env = RankEnv.from_environ()
    init_process_group(env, 60)
    ranks = Ranks(60)
    results: dict[str, Any] = {}
    for case in cases:
        config = config_from_dict(case["config"])
        trainer = ShardedTrainer(config, ranks)
        metrics = trainer._optimize(fixed_batch(**case["batch"]), 1)
        weights = {k: v.clone() for k, v in full_state_dict(trainer.model).items()}
        results[case["name"]] = {"weights": weights, "metrics": metrics}
        trainer.close()
    # ranks that disagree on the config: rank 1 trains with another learning rate
    data = cases[0]["config"]
    if ranks.rank == 1:
        data["optim"] = {**data["optim"], "lr": 0.5}
    try:
        ShardedTrainer(config_from_dict(data), ranks)
        results["disagree"] = "no error"
    except ConfigError as exc:
        results["disagree"] = str(exc)
    # a rank that stops answering: rank 1 sleeps past the bound of a 3-second group
    short = Ranks(3, group=torch.distributed.new_group(backend="gloo", timeout=timedelta(seconds=3)))
    started = time.monotonic()
    try:
        if short.rank == 1:
            time.sleep(6)
        short.gather(1, "a test value")
        results["timeout"] = "no error"
    except RankError as exc:
        results["timeout"] = str(exc)
    results["timeout_s"] = time.monotonic() - started
    if ranks.is_main:
        torch.save(results, out)
    torch.distributed.destroy_process_group()
    exit_torchrun_worker(0)
    return 0


def main() -> int:
    from tests.trainer.toys import register_toys

    register_toys()
    if sys.argv[1:2] == ["--steps"]:
        return run_steps(sys.argv[2], sys.argv[3])
    _kill_switch()
    args = sys.argv[1:]
    from cascade_envs.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
