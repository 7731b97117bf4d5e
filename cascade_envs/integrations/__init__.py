"""Adapters that put cascade envs inside the trainers people already run (one module per trainer).

Each lives behind its own extra and imports nothing of its trainer until it is used.
"""
