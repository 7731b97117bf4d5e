"""An env's rows as verl parquet: ``cascade-envs export --format verl ENV_ID -o out.parquet``.

One verl row per task: ``data_source`` is the env id (so ``distillation.teacher_key=data_source``
routes MOPD teachers per cascade env), ``prompt`` the env's opening chat messages (role and text),
``agent_name`` the agent loop that plays it (``"cascade"``), ``ability`` the env's name,
``reward_model`` ``{"style": "rule" | "model", "ground_truth"}`` (for display: the row rules) and
``extra_info`` ``{"env_id", "task_id", "index", "task_json"}``: the whole row as JSON, which the agent
loop and ``compute_score`` score from. Needs pyarrow only (``cascade-envs[parquet]``), not verl.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..._extras import require
from ...core import Message, Row
from ...export import export, loaded_rows

GROUND_TRUTH_FIELDS = ("expected_answer", "ground_truth", "answer", "reference")


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def verl_row(env: Any, env_id: str, loaded: Any, index: int, agent_name: str = "cascade") -> dict[str, Any]:
    """One loaded task of ``env`` as a verl dataset row."""
    row: Row = loaded.row
    messages: list[Message] = env.prompt(loaded.task)
    truth = next((row[f] for f in GROUND_TRUTH_FIELDS if row.get(f) is not None), "")
    return {
        "data_source": env_id,
        "agent_name": agent_name,
        "prompt": [{"role": str(m["role"]), "content": _text(m.get("content", ""))} for m in messages],
        "ability": env_id.split("/")[-1],
        "reward_model": {
            "style": "model" if getattr(env, "scores_groups", False) else "rule",
            "ground_truth": _text(truth),
        },
        "extra_info": {
            "env_id": env_id,
            "task_id": loaded.task_id,
            "index": index,
            "task_json": json.dumps(row, ensure_ascii=False, default=str),
        },
    }


def verl_rows(
    env_id: str,
    *,
    tasks: str | os.PathLike[str] | Iterable[Row] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    limit: int | None = None,
    agent_name: str = "cascade",
) -> list[dict[str, Any]]:
    """The verl rows of ``env_id``'s tasks (its own task file, or ``tasks``), at most ``limit``."""
    with loaded_rows(env_id, tasks=tasks, limit=limit, env_kwargs=env_kwargs) as (env, items):
        if not items:
            raise ValueError(f"{env_id} has no tasks to export: pass tasks=")
        return [verl_row(env, env_id, loaded, i, agent_name) for i, loaded in enumerate(items)]


def write_rows(
    env: Any, env_id: str, rows: Sequence[Any], output: Path, agent_name: str | None = None
) -> int:
    """Write ``rows`` (``Loaded`` items of ``env.tasks``) to the parquet file ``output`` (the
    ``cascade-envs export`` registry's function); return the row count."""
    require("pyarrow", "exporting verl parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = [verl_row(env, env_id, loaded, i, agent_name or "cascade") for i, loaded in enumerate(rows)]
    pq.write_table(pa.Table.from_pylist(table), os.fspath(output))
    return len(table)


def export_verl(env_id: str, output: str | os.PathLike[str], **kwargs: Any) -> int:
    """``cascade-envs export --format verl``: ``env_id``'s rows (``tasks=``, ``limit=``,
    ``env_kwargs=``, ``agent_name=``) to the parquet file ``output``; return the row count."""
    return export("verl", env_id, output, **kwargs)
