"""A torchrun worker for ``test_weight_sync.py``: the tiny Llama sharded with FSDP2 over 2 gloo ranks,
then ``gathered_buckets`` (the weight sync's gather); rank 0 saves what it gathered and rank 1 how many
tensors it kept (none: only the sending rank keeps them).

    python -m tests.trainer.sharded_gather_worker OUT
"""

from __future__ import annotations

import datetime
import sys


def main(out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from cascade_envs.trainer.parallel.launch import exit_torchrun_worker
    from cascade_envs.trainer.weight_sync import gathered_buckets, trainer_rank
    from tests.trainer.toys import tiny_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    model = tiny_model(20, seed=0)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    rank = trainer_rank()
    sharded = sum(hasattr(p, "full_tensor") for p in model.parameters())
    buckets = list(gathered_buckets(model, 0.004, keep=rank == 0))
    kept = {name: tensor.clone() for bucket in buckets for name, tensor in bucket}
    if rank == 0:
        torch.save({"sharded": sharded, "buckets": len(buckets), "tensors": kept}, out)
    else:
        torch.save({"kept": len(kept)}, out + ".rank1")
    dist.destroy_process_group()
    exit_torchrun_worker(0)  # the mesh outlives the group: gloo's threads must not meet finalization


if __name__ == "__main__":
    main(sys.argv[1])
