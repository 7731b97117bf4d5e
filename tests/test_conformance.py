"""Every registered env (built-ins and the example plugin) passes ``cascade_envs.testing.check_env``.

Adding a built-in env without a case here fails ``test_every_builtin_env_has_a_case``.
"""

from __future__ import annotations

import importlib.util
import json
from importlib import resources
from typing import Any

import pytest

import cascade_envs
from cascade_envs.registry import envs as env_registry
from cascade_envs.testing import ConformanceError, check_env
from tests.envs.agentless.reference_judge import FIX as AGENTLESS_FIX
from tests.envs.agentless.reference_judge import WRONG_FIX as AGENTLESS_WRONG
from tests.envs.agentless.reference_judge import ReferenceJudge
from tests.envs.genrm.scripted import RubricJudge
from tests.envs.long_context.matching import MatchingJudge
from tests.envs.swe.conftest import call as swe_call
from tests.envs.swe.conftest import fix_calls as swe_fix_calls
from tests.envs.swe.conftest import row as swe_row


def bundled(domain: str, index: int = 0) -> dict[str, Any]:
    path = resources.files("cascade_envs.envs").joinpath(domain, "data", "samples.jsonl")
    return json.loads(path.read_text(encoding="utf-8").splitlines()[index])


def workplace_row(task_id: int) -> dict[str, Any]:
    path = resources.files("cascade_envs.envs").joinpath("workplace", "data", "tasks.jsonl")
    return next(r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if r["id"] == task_id)


def tool_calls(calls: list[dict[str, Any]]) -> str:
    return "".join(f'<tool_call>{{"name": "{c["name"]}", "arguments": {c["arguments"]}}}</tool_call>' for c in calls)


SUM = "```python\nimport sys\nd = sys.stdin.read().split()\nt = int(d[0])\nprint('\\n'.join(str(int(d[1 + 2 * i]) + int(d[2 + 2 * i])) for i in range(t)))\n```"

CASES: dict[str, dict[str, Any]] = {
    "cascade/InstructionFollowing-v0": {
        "good_row": {"id": "c", "prompt": "Describe a night. Use the word lantern.",
                     "instruction_id_list": ["keywords:existence"], "kwargs": [{"keywords": ["lantern"]}]},
        "good_answer": "<think>Mention it.</think>A lantern glowed all night.",
        "bad_answer": "It was dark all night.",
        "bad_rows": [({"prompt": "x", "instruction_id_list": "keywords:existence"}, "instruction_id_list"),
                     ({"prompt": "x", "instruction_id_list": ["keywords:existence"], "kwargs": [{}, {}]}, "kwargs")],
    },
    "cascade/MCQA-v0": {
        "good_row": bundled("mcqa"),
        "good_answer": "<think>Nitrogen is about 78%.</think>\\boxed{B}",
        "bad_answer": "\\boxed{A}",
        "bad_rows": [({**bundled("mcqa"), "expected_answer": "Z"}, "expected_answer"),
                     ({**bundled("mcqa"), "options": []}, "options")],
    },
    "cascade/StructuredOutput-v0": {
        "good_row": bundled("structured_outputs"),
        "good_answer": '{"name": "Amara Okafor", "age": 41, "email": "amara.okafor@example.org"}',
        "bad_answer": "I could not find that data.",
        "bad_rows": [({**bundled("structured_outputs"), "schema_str": "{not json"}, "schema_str"),
                     ({**bundled("structured_outputs"), "schema_type": "docx"}, "schema_type")],
    },
    "cascade/Math-v0": {
        "good_row": bundled("math"),
        "good_answer": "<think>2^3 = 1 mod 7, 2^100 = 2^1.</think>The remainder is \\boxed{2}.",
        "bad_answer": "\\boxed{3}",
        "bad_rows": [({**bundled("math"), "expected_answer": ""}, "expected_answer")],
    },
    "cascade/Code-v0": {
        "good_row": bundled("code"),
        "good_answer": f"<think>Python ints are unbounded.</think>{SUM}",
        "bad_answer": "```python\nprint(0)\n```",
        "bad_rows": [({"prompt": "x", "verifier_metadata": {"unit_tests": "none"}}, None)],
        "env_kwargs": {"time_limit_s": 5.0},
    },
    # An outcome-scored env: the "answer" is the tool calls (repeated each turn, they are idempotent);
    # the episode ends at the turn limit and is scored on its final state.
    "cascade/Workplace-v0": {
        "good_row": workplace_row(42),
        "good_answer": tool_calls(workplace_row(42)["ground_truth"]),
        "bad_answer": tool_calls(workplace_row(42)["ground_truth"][:1]),
        "bad_rows": [({**workplace_row(42), "ground_truth": "[{"}, "ground_truth")],
    },
    "cascade/GenRM-v0": {
        "good_row": bundled("genrm", 4),
        "good_answer": "<think>Compare tenths: 9 > 1.</think>9.9 is larger.",
        "bad_rows": [({"responses_create_params": {"input": [{"role": "user", "content": "Hi"},
                                                             {"role": "assistant", "content": "Hello"}]}},
                      "responses_create_params.input")],
        "env_kwargs": {"judge_url": RubricJudge()},
    },
    "cascade/LongContextQA-v0": {
        "good_row": bundled("long_context"),
        "good_answer": "<think>The March minutes name the station.</think>Alder Creek Pump Station, 31 hours",
        "bad_answer": "Harbourview Treatment Plant, 12 hours",
        "bad_rows": [({**bundled("long_context"), "answer": None}, "expected_answer"),
                     ({**bundled("long_context"), "input_tokens": 10**6}, "input_tokens")],
        "env_kwargs": {"judge_url": MatchingJudge()},
    },
    "cascade/AgentlessRepair-v0": {
        "good_row": bundled("agentless"),
        "good_answer": AGENTLESS_FIX,
        "bad_answer": AGENTLESS_WRONG,
        "bad_rows": [({**bundled("agentless"), "gold_files": []}, "gold_files"),
                     ({**bundled("agentless"), "patch": "nonsense"}, "patch")],
        "env_kwargs": {"judge_url": ReferenceJudge()},
    },
    "cascade/SWE-v0": {  # needs the OpenHands SDK (Python >= 3.12): run by .ci/swe.sh's venv
        "good_row": swe_row("inilite"),
        "good_answer": swe_fix_calls("inilite")[0] + swe_call("finish", message="Done."),
        "bad_answer": swe_call("terminal", command="ls") + swe_call("finish", message="Done."),
        "bad_rows": [({**swe_row("inilite"), "FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS"),
                     ({**swe_row("inilite"), "repo_snapshot": None}, "repo_snapshot")],
        "env_kwargs": {"command_timeout_s": 10},
    },
}
NEEDS_OPENHANDS = {"cascade/SWE-v0"}


def test_every_builtin_env_has_a_case():
    builtin = sorted(i for i in env_registry if i.startswith("cascade/"))
    assert builtin == sorted(CASES)


@pytest.mark.parametrize("env_id", sorted(CASES))
def test_builtin_env_conforms(env_id):
    if env_id in NEEDS_OPENHANDS and importlib.util.find_spec("openhands") is None:
        pytest.skip(f"{env_id} needs the OpenHands SDK (Python >= 3.12): bash .ci/swe.sh runs it")
    check_env(env_id, **CASES[env_id])


def test_check_env_catches_an_env_that_scores_an_empty_answer_1():
    from tests.toy_envs import ExactAnswerEnv

    class Generous(ExactAnswerEnv):
        async def ascore(self, task, answer):
            return cascade_envs.Reward(1.0)

    with pytest.raises(ConformanceError, match="a empty answer must score a plain 0"):
        check_env(Generous(), {"prompt": "q", "answer": "4"}, "4")


def test_check_env_catches_an_env_that_masks_a_wrong_answer():
    from tests.toy_envs import ExactAnswerEnv

    class Touchy(ExactAnswerEnv):
        async def ascore(self, task, answer):
            if answer != task.answer:
                raise ValueError("cannot parse")
            return cascade_envs.Reward(1.0)

    with pytest.raises(ConformanceError, match="masked"):
        check_env(Touchy(), {"prompt": "q", "answer": "4"}, "4", bad_answer="5")


def test_check_env_catches_a_row_error_that_is_not_a_task_error():
    from cascade_envs import Prompt
    from tests.toy_envs import ExactAnswerEnv, ExactTask

    class Sloppy(ExactAnswerEnv):
        def load_task(self, row):
            answer = row["answer"].strip()  # KeyError / AttributeError on bad rows
            return ExactTask(Prompt.of(row), answer)

    with pytest.raises(ConformanceError, match="not TaskError"):
        check_env(Sloppy(), {"prompt": "q", "answer": "4"}, "4")
