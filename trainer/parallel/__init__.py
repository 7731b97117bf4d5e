"""Sharded data-parallel training on ``torch.distributed``: FSDP2 over the ranks, DCP checkpoints.

``cascade-envs train --nproc N`` (or ``train.world_size: N``) starts N ranks with torchrun
(``launch.py``); each runs ``run_rank`` (the per-rank entry a Ray worker calls too). Modules:
``ranks.py`` (process group, bounded collectives, slices, config agreement), ``fsdp.py`` (sharding,
mixed precision, CPU offload), ``dcp.py`` (sharded checkpoints and the consolidated HF export),
``trainer.py`` (``ShardedTrainer``). Nothing here is imported by ``import cascade_envs``.
"""
