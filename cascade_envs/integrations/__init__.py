"""Adapters that put cascade envs inside other trainers' protocols; each needs its own extra."""
