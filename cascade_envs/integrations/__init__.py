"""Adapters that put cascade envs inside other trainers and protocols (TRL, verl, NeMo Gym, OpenEnv).

One module per trainer or protocol, each behind its own extra (``pip install 'cascade-envs[trl]'``);
nothing here is imported by ``import cascade_envs``.
"""
