"""The one source of sampling and concurrency defaults, shared by ``eval``, the runner and the trainer."""

DEFAULT_MAX_TOKENS = 1024
"""Maximum tokens per model turn; a response cut there scores 0 (the overlong rule)."""
DEFAULT_TEMPERATURE = 1.0
"""Sampling temperature of every Cascade RL stage (RECIPE.md: temperature 1.0)."""
DEFAULT_TOP_P = 1.0
"""Nucleus sampling of every Cascade RL stage (RECIPE.md: top-p 1.0)."""
DEFAULT_CONCURRENCY = 64
"""Episodes in flight at once in one runner."""
