"""``cascade-envs export --format nemo-gym``: an env's rows as NeMo Gym JSONL.

Each line: ``responses_create_params`` (``input``: the episode's opening messages exactly as the env
builds them, tools announced in the system prompt in cascade's text mode), ``task_source`` (the
NeMo Gym config instance that declares the rows: NeMo Gym 0.7 routes a row by it to that agent, or
to the one agent of that resources server, and on through the agent's environment server; there is
no ``agent_ref``, which 0.7 reads as the deprecated routing), ``cascade_env`` (the env id) and
``cascade_row`` (the row itself, which ``/seed_session`` and ``/reset`` start the episode from).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...data import Loaded
from ...env import Env
from .responses import input_messages

AGENT_NAME = "cascade_agent"
"""Default ``task_source``: the agent instance of the NeMo Gym config that plays the rows."""


def gym_row(env: Env, env_id: str, loaded: Loaded[Any], task_source: str = AGENT_NAME) -> dict[str, Any]:
    """One NeMo Gym row of ``loaded`` (an item of ``env.tasks``), routed by ``task_source``."""
    return {
        "responses_create_params": {"input": input_messages(env.prompt(loaded.task))},
        "task_source": task_source,
        "cascade_env": env_id,
        "cascade_row": loaded.row,
    }


def write_rows(
    env: Env, env_id: str, rows: Sequence[Loaded[Any]], output: Path, agent_name: str | None = None
) -> int:
    """Write ``rows`` to ``output`` as NeMo Gym JSONL (the ``export`` registry's function);
    ``agent_name``: their ``task_source``."""
    with output.open("w", encoding="utf-8") as f:
        for loaded in rows:
            row = gym_row(env, env_id, loaded, agent_name or AGENT_NAME)
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return len(rows)
