import pytest

import cascade_envs
from cascade_envs import CascadeError, UnknownIdError
from cascade_envs.registry import Registry, Spec


def test_unknown_id_suggests_close_matches():
    with pytest.raises(UnknownIdError, match=r"did you mean 'toy/ExactAnswer-v0'"):
        cascade_envs.make("toy/ExactAnswr-v0")


def test_make_passes_kwargs_over_defaults():
    env = cascade_envs.make("toy/ExactAnswer-v0", thinking=False, max_turns=2)
    assert env.thinking is False and env.max_turns == 2


def test_spec_records_plugin():
    s = cascade_envs.spec("toy/ExactAnswer-v0")
    assert s.entry_point == "tests.toy_envs:ExactAnswerEnv" and s.plugin == "<runtime>"


def test_bad_ids_are_rejected():
    with pytest.raises(CascadeError, match="namespace/Name-vN"):
        cascade_envs.register("NoNamespace-v0", "x:y")


def test_missing_dependency_names_the_extra():
    spec = Spec("toy/NeedsTorch-v0", "torch_is_not_here_module:Env")
    with pytest.raises(CascadeError, match="not installed"):
        spec.load()
    spec = Spec("toy/Vllm-v0", "vllm.nonexistent:Env")
    with pytest.raises(CascadeError, match=r"cascade-envs\[vllm\]"):
        spec.load()


def test_missing_attribute_is_reported():
    with pytest.raises(CascadeError, match="not found"):
        Spec("toy/X-v0", "tests.toy_envs:Nope").load()


def test_generic_registry_duplicate_and_lookup():
    r: Registry[int] = Registry("widget")
    r.register("a", 1)
    with pytest.raises(CascadeError, match="already registered"):
        r.register("a", 2)
    r.register("a", 3, replace=True)
    assert r.get("a") == 3 and "a" in r and list(r) == ["a"]
    with pytest.raises(UnknownIdError, match="unknown widget 'b'"):
        r.get("b")


def test_registry_loader_is_injected_and_resettable():
    calls = []
    r: Registry[int] = Registry("widget")
    assert r.is_loaded

    def load() -> None:
        calls.append(1)
        r.register("a", len(calls))

    r.set_loader(load, note=lambda: "; a plugin failed")
    assert not r.is_loaded
    assert r.get("a") == 1 and r.is_loaded and list(r) == ["a"] and calls == [1]
    with pytest.raises(UnknownIdError, match=r"unknown widget 'b'; a plugin failed$"):
        r.get("b")
    r.clear()
    assert list(r) == [] and calls == [1]  # cleared, still loaded
    r.reset()
    assert not r.is_loaded and r.get("a") == 2 and calls == [1, 1]
    r.reset()
    r.mark_loaded()  # someone else filled it
    assert "a" not in r and calls == [1, 1]


def test_env_specs_and_the_registry_module():
    import types

    specs = cascade_envs.env_specs()
    assert "toy/ExactAnswer-v0" in specs and specs["toy/ExactAnswer-v0"].entry_point.endswith(
        ":ExactAnswerEnv"
    )
    assert isinstance(cascade_envs.registry, types.ModuleType)  # no function shadows the module
    assert cascade_envs.registry.envs.is_loaded
