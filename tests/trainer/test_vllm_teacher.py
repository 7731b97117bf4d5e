"""The vLLM MOPD teacher (prompt logprobs), for real on CPU (``vllm-cpu``; run by ``.ci/vllm.sh``).

One module-scoped ``VLLMTeacher`` over a saved tiny Llama (head size 32, which vLLM's CPU attention
accepts; weights perturbed so the distribution is sharp and top-1 is meaningful). Its scores must
equal ``HFScorer``'s forward pass of the same checkpoint, and a MOPD trainer with
``mopd.teacher_engine: vllm`` must score each step with one ``generate`` call per teacher.

The config tests need no vLLM; the others skip without it, except under ``CASCADE_REQUIRE_VLLM=1``
(set by ``.ci/vllm.sh``), where a missing vLLM fails them.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from cascade_envs.core import CascadeError  # noqa: E402
from cascade_envs.trainer.checks import config_from_dict  # noqa: E402
from cascade_envs.trainer.config import ConfigError  # noqa: E402
from cascade_envs.trainer.sequence import TrainSequence  # noqa: E402
from tests.trainer.toys import WORDS, tiny_model, tiny_tokenizer  # noqa: E402

TOL = 1e-4  # float32 on both sides: max |vLLM - transformers| measured 1.05e-5 over 161 tokens
ENV_A, ENV_B = "test/SayYes-v0", "test/Constant-v0"


def needs_vllm() -> None:
    if os.environ.get("CASCADE_REQUIRE_VLLM") != "1":
        pytest.importorskip("vllm", reason="vllm is not installed here: bash .ci/vllm.sh runs these tests")


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("vllm-teacher")
    tok = tiny_tokenizer()
    model = tiny_model(len(tok), seed=0, hidden=64)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def teacher(teacher_dir):
    needs_vllm()
    from cascade_envs.trainer.vllm_teacher import VLLMTeacher

    scorer = VLLMTeacher(
        "mopd.default_teacher", teacher_dir, temperature=1.0, dtype="float32", max_model_len=128, seed=0
    )
    yield scorer
    scorer.close()


def sequences(n: int = 6, seed: int = 0) -> list[TrainSequence]:
    """Chat prompts with random word responses of varied length; some env tokens (loss mask 0)."""
    tok = tiny_tokenizer()
    gen = torch.Generator().manual_seed(seed)
    words = tok.convert_tokens_to_ids(WORDS)
    out = []
    for i in range(n):
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": " ".join(WORDS[i : i + 3])}],
            add_generation_prompt=True,
            tokenize=False,
        )
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        length = 3 + int(torch.randint(12, (1,), generator=gen))
        response = [words[j] for j in torch.randint(len(words), (length,), generator=gen).tolist()]
        mask = [0 if 1 <= k <= 2 else 1 for k in range(length)]
        out.append(TrainSequence(prompt_ids, response, 0.0, ENV_A if i % 2 else ENV_B, loss_mask=mask))
    return out


def hf_scores(teacher_dir: Path, seqs: list[TrainSequence], temperature: float = 1.0) -> Any:
    from transformers import AutoModelForCausalLM

    from cascade_envs.trainer.sources import HFScorer

    model = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32)
    # One sequence per micro-batch: the shared-prompt path of ``response_logits`` currently attends
    # with the loss mask, so env tokens (loss mask 0) would be hidden from later positions.
    return HFScorer(
        "hf", model, pad_id=tiny_tokenizer().pad_token_id, micro_batch_size=1, temperature=temperature
    ).score(seqs)


@pytest.mark.slow
def greedy_sequence(teacher_dir: Path, prompt_ids: list[int], n: int = 6) -> TrainSequence:
    """The teacher's own greedy continuation: every response token is its top-1."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32)
    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return TrainSequence(list(prompt_ids), ids[len(prompt_ids) :], 0.0, ENV_A)


def test_scores_match_the_transformers_teacher_in_one_generate_call(teacher, teacher_dir):
    seqs = sequences()
    seqs.append(greedy_sequence(teacher_dir, seqs[0].prompt_ids))
    calls = teacher.generate_calls
    got = teacher.score(seqs)
    assert teacher.generate_calls == calls + 1
    want = hf_scores(teacher_dir, seqs)
    worst = 0.0
    for g, w, seq in zip(got, want, seqs, strict=True):
        assert len(g.logprobs) == len(g.top1) == len(seq.response_ids)  # env tokens scored too
        worst = max(worst, (torch.tensor(g.logprobs) - torch.tensor(w.logprobs)).abs().max().item())
        assert g.top1 == w.top1
    assert worst < TOL, worst
    assert all(got[-1].top1), "the teacher's greedy continuation is its top-1 everywhere"
    assert not all(f for g in got[:-1] for f in g.top1), "random words are not all top-1"
    again = teacher.score(seqs)  # the same prompts again (prefix caching is on by default)
    assert [a.logprobs for a in again] == [g.logprobs for g in got] and [a.top1 for a in again] == [
        g.top1 for g in got
    ]
    assert teacher.score([]) == []


@pytest.mark.slow
def test_vllm_prompt_logprobs_ignore_the_request_temperature(teacher, teacher_dir):
    """The premise of the T in {0, 1} rule: vLLM scores prompts with the raw distribution."""
    import vllm

    seqs = sequences(2, seed=1)
    params = vllm.SamplingParams(max_tokens=1, temperature=0.7, prompt_logprobs=0, detokenize=False)
    outs = teacher.llm.generate(
        [{"prompt_token_ids": s.prompt_ids + s.response_ids} for s in seqs], params, use_tqdm=False
    )
    raw, scaled = hf_scores(teacher_dir, seqs), hf_scores(teacher_dir, seqs, temperature=0.7)
    for out, seq, r, s in zip(outs, seqs, raw, scaled, strict=True):
        steps = out.prompt_logprobs[len(seq.prompt_ids) :]
        got = torch.tensor([step[t].logprob for step, t in zip(steps, seq.response_ids, strict=True)])
        assert (got - torch.tensor(r.logprobs)).abs().max() < TOL
        assert (got - torch.tensor(s.logprobs)).abs().max() > 0.01


@pytest.mark.slow
def test_sequences_that_do_not_fit_fail_naming_the_key(teacher):
    long = TrainSequence([1] * 100, [2] * 40, 0.0, ENV_A)
    with pytest.raises(CascadeError, match=r"mopd\.teacher_engine_kwargs\.max_model_len"):
        teacher.score([long])
    with pytest.raises(CascadeError, match="no prompt tokens"):
        teacher.score([TrainSequence([], [2, 3], 0.0, ENV_A)])


@pytest.mark.slow
def test_a_mopd_trainer_with_vllm_teachers_generates_once_per_teacher_per_step(
    teacher, teacher_dir, tiny_model_dir, tmp_path, monkeypatch
):
    """``load_teachers`` builds a VLLMTeacher per teacher folder (here the module's engine, to start vLLM once)."""
    from cascade_envs.trainer import teachers
    from cascade_envs.trainer.loop import Trainer

    built: list[tuple[str, str, dict[str, Any]]] = []

    def build(name: str, path: str, *, temperature: float, **kwargs: Any) -> Any:
        built.append((name, path, {"temperature": temperature, **kwargs}))
        return teacher

    monkeypatch.setattr(teachers, "VLLMTeacher", build)
    config = mopd_config(
        tiny_model_dir,
        tmp_path,
        {ENV_A: str(teacher_dir)},
        default=str(teacher_dir),
        teacher_engine="vllm",
        teacher_engine_kwargs={"max_model_len": 128},
    )
    trainer = Trainer(config)
    assert built == [
        (
            f"mopd.teachers.{ENV_A}",
            str(teacher_dir.resolve()),
            {"temperature": 1.0, "dtype": "float32", "max_model_len": 128},
        )
    ]
    assert trainer.sources["teacher"].scorer_of(ENV_A) == trainer.sources["teacher"].scorer_of(ENV_B)
    calls = teacher.generate_calls
    for step in range(2):
        trainer.train_step()
        assert teacher.generate_calls == calls + step + 1
    trainer.close()


def mopd_config(
    student: Path,
    out: Path,
    teachers: dict[str, str],
    default: str | None = None,
    temperature: float = 1.0,
    **mopd: Any,
) -> Any:
    return config_from_dict(
        {
            "algorithm": "mopd",
            "model": {"path": str(student)},
            "mix": {"envs": {ENV_A: 1.0, ENV_B: 1.0}},
            "mopd": {"teachers": teachers, "default_teacher": default, **mopd},
            "rollout": {"group_size": 1, "prompts_per_step": 4, "max_tokens": 6, "temperature": temperature},
            "optim": {"lr": 1e-3, "micro_batch_size": 4},
            "train": {
                "steps": 2,
                "output_dir": str(out / "run"),
                "save_every": 100,
                "tensorboard": False,
                "progress": False,
                "plot": False,
            },
        }
    )


@pytest.mark.parametrize(
    ("mopd", "temperature", "match"),
    [
        ({"teacher_engine": "sglang"}, 1.0, "mopd.teacher_engine must be hf or vllm"),
        ({"teacher_engine_kwargs": ["max_model_len"]}, 1.0, "mopd.teacher_engine_kwargs: expected a mapping"),
        ({"teacher_engine": "vllm"}, 0.7, "mopd.teacher_engine: vllm scores with the raw"),
    ],
)
def test_teacher_engine_settings_are_checked_naming_the_key(
    tiny_model_dir, tmp_path, mopd, temperature, match
):
    with pytest.raises(ConfigError, match=match):
        mopd_config(
            tiny_model_dir, tmp_path, {}, default=str(tiny_model_dir), temperature=temperature, **mopd
        )
    mopd_config(
        tiny_model_dir, tmp_path, {}, default=str(tiny_model_dir), temperature=0.0, teacher_engine="vllm"
    )


def test_the_vllm_teacher_refuses_other_temperatures_and_names_a_missing_vllm(tmp_path, monkeypatch):
    from cascade_envs.trainer.vllm_teacher import VLLMTeacher

    real = importlib.util.find_spec
    with pytest.raises(CascadeError, match=r"needs mopd\.teacher_engine: hf"):
        VLLMTeacher("mopd.default_teacher", tmp_path, temperature=0.7)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(CascadeError, match=r"pip install 'cascade-envs\[vllm\]'"):
        VLLMTeacher("mopd.default_teacher", tmp_path, temperature=1.0)
