"""Shared fixtures of the workplace tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cascade_envs.envs.workplace.env import WorkplaceEnv


@pytest.fixture(scope="module")
def env() -> Iterator[WorkplaceEnv]:
    """The env on its bundled tables and tasks, one per test module (modules may override it)."""
    made = WorkplaceEnv()
    yield made
    made.close()
