"""The easy per-domain train/held-out sets of the laptop-scale cascade (``cascade_demo``).

Every file loads in its env (every row a task), the held-out sets have 24 tasks, and a train file
and its held-out file never share a row, an id or a prompt.
"""

from __future__ import annotations

import json

import pytest

from cascade_envs.data import ID_FIELDS, read_rows
from cascade_envs.env_set import EnvSet

DOMAINS = {
    "instruction_following": "cascade/InstructionFollowing-v0",
    "mcqa": "cascade/MCQA-v0",
    "structured_outputs": "cascade/StructuredOutput-v0",
    "math": "cascade/Math-v0",
    "code": "cascade/Code-v0",
    "long_context": "cascade/LongContextQA-v0",
}
JUDGED = {"cascade/LongContextQA-v0"}


def prompt_text(row: dict) -> str:
    if "prompt" in row:
        return json.dumps(row["prompt"])
    return json.dumps(row["responses_create_params"]["input"])


def row_id(row: dict) -> str:
    found = [str(row[k]) for k in ID_FIELDS if row.get(k) is not None]
    assert found, f"a row without an id: {prompt_text(row)[:80]}"
    return found[0]


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_train_and_heldout_load_and_never_overlap(domain):
    env_id = DOMAINS[domain]
    files = {split: f"bundled:{domain}/{split}.jsonl" for split in ("easy", "easy_heldout")}
    rows = {split: [row for _, row in read_rows(path)] for split, path in files.items()}
    for split, path in files.items():
        kwargs = {"tasks": path, **({"judge_url": "embedded"} if env_id in JUDGED else {})}
        envs = EnvSet({env_id: kwargs})
        try:
            assert len(list(envs.env(env_id).tasks)) == len(rows[split]), split  # no row dropped
        finally:
            envs.close()
    assert len(rows["easy_heldout"]) == 24 and len(rows["easy"]) >= 24
    ids = {split: [row_id(r) for r in rs] for split, rs in rows.items()}
    for split in ids:
        assert len(set(ids[split])) == len(ids[split]), f"{split}: duplicate ids"
    assert not set(ids["easy"]) & set(ids["easy_heldout"])
    assert not {prompt_text(r) for r in rows["easy"]} & {prompt_text(r) for r in rows["easy_heldout"]}
