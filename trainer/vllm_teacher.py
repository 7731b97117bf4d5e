"""A MOPD teacher served by vLLM: the sampled tokens' log-probs from vLLM's prompt logprobs.

``VLLMTeacher.score`` sends every sequence of the step as one ``generate`` call whose prompt is
``prompt_ids + response_ids`` (``max_tokens=1``, ``prompt_logprobs=0``): vLLM then returns, for every
prompt position, the log-prob of the actual next token and its rank, so each response token gets
its log-prob and a top-1 flag (rank 1) in one prefill, env tokens (``loss_mask`` 0) included.

**Temperature.** vLLM computes prompt logprobs from the raw logits (``log_softmax(logits)``; the
request's temperature and ``logprobs_mode`` only shape sampled tokens), and the top-k it returns
cannot be rescaled to ``logits / T``. The transformers teacher (``sources.HFScorer``) scores with
``logits / T``, so the two agree only at ``T = 1`` (and greedy ``T = 0``, which both score at 1):
``teachers.check_teachers`` rejects ``teacher_engine: vllm`` with any other ``rollout.temperature``.

The engine is built like the rollout engine's (``VLLMEngine``): in-process (no engine-core process),
eager on CPU, explicit sampling only (``generation_config="vllm"``), extra keyword arguments to
``vllm.LLM`` (``mopd.teacher_engine_kwargs``). A rank tie with another token reports ``top1`` false
where ``HFScorer``'s argmax may pick the sampled token; with real-valued logits ties are rare.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._extras import require
from ..core import CascadeError
from .sequence import TokenScores, TrainSequence
from .vllm_setup import in_process_vllm_environment, model_folder

GREEDY_TEMPERATURES = (0.0, 1.0)
"""Rollout temperatures at which vLLM's prompt logprobs equal ``HFScorer``'s ``log_softmax(logits / T)``."""


class VLLMTeacher:
    """A frozen teacher checkpoint in an in-process ``vllm.LLM``, scoring with prompt logprobs.

    ``path`` is a local checkpoint folder; ``temperature`` is the rollout temperature and must be 0
    or 1 (see the module docstring). ``engine_kwargs`` go to ``vllm.LLM`` (``dtype``,
    ``gpu_memory_utilization``, ``max_model_len``, ``seed``, ``enforce_eager``, ...).
    """

    def __init__(self, name: str, path: str | Path, *, temperature: float = 1.0, **engine_kwargs: Any):
        if temperature not in GREEDY_TEMPERATURES:
            raise CascadeError(
                f"{name}: vLLM prompt logprobs are of the raw distribution (T = 1); rollout "
                f"temperature {temperature} needs mopd.teacher_engine: hf"
            )
        require("vllm", "the vLLM MOPD teacher")
        folder = model_folder(path)
        in_process_vllm_environment()
        import vllm
        from vllm.platforms import current_platform

        engine_kwargs.setdefault("enforce_eager", current_platform.is_cpu())
        engine_kwargs.setdefault("generation_config", "vllm")
        engine_kwargs.setdefault(
            "gpu_memory_utilization", 0.3
        )  # the student and the rollout engine share the GPU
        self.name = name
        self.llm = vllm.LLM(model=str(folder), tokenizer=str(folder), **engine_kwargs)
        model_config = self.llm.llm_engine.vllm_config.model_config
        self.max_model_len: int = model_config.max_model_len
        self.vocab_size: int = model_config.get_vocab_size()
        self.params = vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        self.generate_calls = 0

    def tokenizer(self) -> Any:
        """The teacher's tokenizer (for the same-vocabulary check)."""
        return self.llm.get_tokenizer()

    def score(self, sequences: Sequence[TrainSequence]) -> list[TokenScores]:
        """Per-token log-probs and top-1 flags of each sequence's response tokens, in one ``generate``."""
        if not sequences:
            return []
        prompts = [{"prompt_token_ids": self._token_ids(seq)} for seq in sequences]
        self.generate_calls += 1
        outputs = self.llm.generate(prompts, self.params, use_tqdm=False)
        return [self._read(out, seq) for out, seq in zip(outputs, sequences, strict=True)]

    def _token_ids(self, seq: TrainSequence) -> list[int]:
        if not seq.prompt_ids:
            raise CascadeError(
                f"{self.name}: a sequence of env {seq.env_id} has no prompt tokens to condition on"
            )
        ids = list(seq.prompt_ids) + list(seq.response_ids)
        if len(ids) >= self.max_model_len:
            raise CascadeError(
                f"{self.name}: a sequence of {len(ids)} tokens does not fit the teacher's max_model_len "
                f"{self.max_model_len}; raise mopd.teacher_engine_kwargs.max_model_len"
            )
        return ids

    def _read(self, out: Any, seq: TrainSequence) -> TokenScores:
        """The response positions of one request's prompt logprobs."""
        start = len(seq.prompt_ids)
        steps = list(out.prompt_logprobs or [])[start:]
        if len(steps) != len(seq.response_ids):
            raise CascadeError(
                f"{self.name}: vLLM returned {len(steps)} prompt logprobs for "
                f"{len(seq.response_ids)} response tokens"
            )
        logprobs: list[float] = []
        top1: list[bool] = []
        for step, token in zip(steps, seq.response_ids, strict=True):
            entry = step.get(token) if step is not None else None
            if entry is None:
                raise CascadeError(f"{self.name}: vLLM's prompt logprobs lack token {token}")
            logprobs.append(float(entry.logprob))
            top1.append(entry.rank == 1)
        return TokenScores(logprobs, top1)

    def close(self) -> None:
        """Shut the engine core down (frees its memory)."""
        self.llm.llm_engine.engine_core.shutdown()
