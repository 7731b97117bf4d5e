"""Import this module to make every cascade id available to ``gymnasium.make``.

gymnasium.make("cascade_envs.gym:cascade/MCQA-v0")   # imports this module first
"""

from .registry import envs

envs.ensure_loaded()
