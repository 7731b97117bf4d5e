"""Built-in environments, one subpackage per domain, registered through the plugin hook."""

from __future__ import annotations

from ..plugins import hookimpl

BUILTIN_ENVS: dict[str, tuple[str, dict]] = {
    # id: (entry point, default kwargs) -- each domain adds its line(s) here
    "cascade/MCQA-v0": ("cascade_envs.envs.mcqa.env:MCQAEnv", {}),
    "cascade/StructuredOutput-v0": ("cascade_envs.envs.structured_outputs.env:StructuredOutputEnv", {}),
    "cascade/Math-v0": ("cascade_envs.envs.math.env:MathEnv", {}),
    "cascade/Code-v0": ("cascade_envs.envs.code.env:CodeEnv", {}),
    "cascade/InstructionFollowing-v0": (
        "cascade_envs.envs.instruction_following.env:InstructionFollowingEnv",
        {},
    ),
    "cascade/Workplace-v0": ("cascade_envs.envs.workplace.env:WorkplaceEnv", {}),
    "cascade/GenRM-v0": ("cascade_envs.envs.genrm.env:GenRMEnv", {}),
    "cascade/LongContextQA-v0": ("cascade_envs.envs.long_context.env:LongContextQAEnv", {}),
    "cascade/AgentlessRepair-v0": ("cascade_envs.envs.agentless.env:AgentlessRepairEnv", {}),
    "cascade/SWE-v0": ("cascade_envs.envs.swe.env:SweEnv", {}),
    # any NeMo Gym resources server (url=, server= or command=; NeMo Gym rows as tasks=)
    "nemo-gym/Resources-v0": ("cascade_envs.integrations.nemo_gym.env:NemoGymEnv", {}),
}


DEFAULT_EVAL_ENVS: tuple[str, ...] = (
    # the domains that run on a CPU with no judge server: `cascade-envs eval` plays these by default
    "cascade/InstructionFollowing-v0",
    "cascade/MCQA-v0",
    "cascade/Workplace-v0",
    "cascade/StructuredOutput-v0",
    "cascade/Math-v0",
    "cascade/Code-v0",
)


@hookimpl
def cascade_envs_register_envs(register) -> None:
    for env_id, (entry_point, kwargs) in BUILTIN_ENVS.items():
        register(env_id, entry_point=entry_point, **kwargs)


@hookimpl
def cascade_envs_register_judges(register) -> None:
    # the embedded 135M model as an in-process judge (judge_url: embedded): the CPU smoke runs need no server
    register("embedded", entry_point="cascade_envs.judges.embedded:EmbeddedJudge")
