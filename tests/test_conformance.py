"""Every built-in env in the registry passes ``check_env`` with the case its package carries
(``cascade_envs.envs.<domain>.conformance.CASE``); ``check_env`` catches envs that break the contract.

A built-in env without a conformance case fails ``test_every_builtin_env_has_a_case``.
"""

from __future__ import annotations

import json

import pytest

import cascade_envs
from cascade_envs.testing import ConformanceError, check_env, conformance_case

BUILTIN = sorted(env_id for env_id in cascade_envs.env_specs() if env_id.startswith("cascade/"))


def test_every_builtin_env_has_a_case():
    missing = []
    for env_id in BUILTIN:
        try:
            conformance_case(env_id)
        except LookupError as exc:
            missing.append(str(exc))
    assert len(BUILTIN) >= 10 and not missing


@pytest.mark.parametrize("env_id", BUILTIN)
def test_builtin_env_conforms(env_id):
    case = conformance_case(env_id)
    if case.missing:
        pytest.skip(
            f"{env_id} needs {', '.join(case.missing)}, not installed here (SWE: bash .ci/swe.sh runs it)"
        )
    case.check(env_id)


def test_check_env_catches_an_env_that_pays_a_malformed_answer():
    from tests.toy_envs import ExactAnswerEnv

    class Generous(ExactAnswerEnv):
        async def ascore(self, task, answer):
            return cascade_envs.Reward(1.0)

    # the empty, whitespace and invisible answers never reach ascore (the kernel's no-answer rule)
    with pytest.raises(ConformanceError, match="a several megabytes answer must score a plain 0"):
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


def test_check_env_catches_instances_that_share_their_tasks():
    from tests.toy_envs import ExactAnswerEnv

    loaded: dict[str, object] = {}

    class Cached(ExactAnswerEnv):
        def load_task(self, row):  # a process-wide cache: another instance's settings would leak in
            return loaded.setdefault(json.dumps(row, sort_keys=True), super().load_task(row))

    row = {"prompt": "q", "answer": "4"}
    with pytest.raises(ConformanceError, match="two instances share the tasks"):
        check_env(Cached(tasks=[row]), row, "4", other_kwargs={"tasks": [row]})
