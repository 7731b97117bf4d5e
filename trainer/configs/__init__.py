"""Shipped trainer configs (YAML package data): the embedded default run and the Cascade RL stages."""
