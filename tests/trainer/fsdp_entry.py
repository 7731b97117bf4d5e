"""A per-rank FSDP2 entry for the launcher tests: one AdamW step of the tiny Llama on a fixed batch,
each rank training its slice (gloo), the same whether torchrun or ``launch_ranks`` starts the ranks.

``train(out)`` returns the updated full weights on rank 0 (``None`` elsewhere) and saves them to
``out`` when given; ``python -m tests.trainer.fsdp_entry OUT`` does the same under torchrun. With
``FAIL_RANK`` set, that rank dies (``os._exit``) just before the step, as a rank lost to an OOM kill.
"""

from __future__ import annotations

import datetime
import os
import sys
from typing import Any


def train(out: str | None = None) -> dict[str, Any] | None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from tests.trainer.toys import tiny_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        model = tiny_model(20, seed=0).train()
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        batch = torch.randint(3, 20, (4, 10), generator=torch.Generator().manual_seed(1))
        mine = batch.chunk(world)[rank]
        if os.environ.get("FAIL_RANK") == str(rank):
            os._exit(3)
        loss = model(input_ids=mine, labels=mine).loss / world  # mean over the ranks' equal slices
        loss.backward()
        optimizer.step()
        state = {name: p.full_tensor().detach().clone() for name, p in model.named_parameters()}
        if out and rank == 0:
            torch.save(state, out)
        return state if rank == 0 else None
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    train(sys.argv[1] if len(sys.argv) > 1 else None)
