"""Rollout engines: what generates the trainer's rollouts, and how it gets the newest weights.

A ``RolloutEngine`` is a ``Policy`` (the rollout runner calls ``agenerate``) that can also receive
the training model's weights after each optimizer step (``sync_weights``). Engines, by
``rollout.engine`` (``make_engine``):

- ``hf``: ``HFEngine`` (this module), Hugging Face transformers generation through ``HFPolicy``. When
  it generates with the training model object itself, ``sync_weights`` has nothing to do.
- ``vllm``: ``VLLMEngine`` (``trainer/vllm_engine.py``), in-process vLLM, weights copied in place.
- ``ray``: ``RayEngine`` (``trainer/ray_engine.py``), HF or vLLM engines in Ray actors, weights sent
  bucket by bucket after each step.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from ..core import CascadeError, Completion, Message
from ..policy import SamplingParams
from .config import RolloutConfig
from .vllm_engine import VLLMEngine


@runtime_checkable
class RolloutEngine(Protocol):
    """A policy the runner can drive whose weights the trainer keeps current.

    An engine implements ``agenerate``, ``sync_weights`` and ``aclose``; ``sleep``/``wake_up``
    (free and restore the engine's accelerator memory around the optimizer phase) do nothing
    unless the engine can sleep (a subclass inherits these no-ops).
    """

    async def agenerate(
        self, messages: list[Message], *, sampling: SamplingParams, thinking: bool = True
    ) -> Completion: ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the next generations use ``model``'s current weights."""
        ...

    def sleep(self) -> None:
        """Free the engine's accelerator memory while the trainer steps (no-op by default)."""
        return None

    def wake_up(self) -> None:
        """Restore what ``sleep`` freed (no-op by default; the next generation may do it itself)."""
        return None

    async def aclose(self) -> None:
        """Stop the engine's background work."""
        ...


class HFEngine(RolloutEngine):
    """Generation with Hugging Face transformers (CPU or GPU) via ``HFPolicy``.

    By default it samples from the training model object, so rollouts always use the current
    weights and ``sync_weights`` is a no-op. Given a separate ``model`` (e.g. a bf16 inference
    copy), ``sync_weights`` copies the training weights into it in place. ``autocast_dtype`` (the
    trainer's mixed precision, ``make_engine`` passes it) generates under the same autocast as the
    training forward pass, so the reported logprobs come from the numeric path trained on
    (``precision.py``); on a GPU each decoding step is a CUDA graph replay (``static_decoding.py``).

    ``max_batch_size`` defaults to ``DEFAULT_MAX_BATCH_SIZE``, larger than ``HFPolicy``'s: a
    step's rollouts (prompts x group size, oversampled) then share one batch. On CPU a batch cut
    in two costs nearly twice as much: each decoding step of a small remainder batch is almost as
    slow as a full one (measured: 16 + 4 rows took 10.1 s + 5.6 s on SmolLM2-135M).
    """

    DEFAULT_MAX_BATCH_SIZE = 64

    def __init__(
        self, model: Any, tokenizer: Any, autocast_dtype: torch.dtype | None = None, **policy_kwargs: Any
    ):
        from ..policies.hf import HFPolicy

        moved = sorted({"dtype", "device"} & set(policy_kwargs))
        if moved:  # HFPolicy would move or cast the training model itself
            raise CascadeError(
                f"rollout.engine_kwargs.{moved[0]}: the HF engine generates with the training model; "
                f"set model.{moved[0]} instead"
            )
        policy_kwargs.setdefault("max_batch_size", self.DEFAULT_MAX_BATCH_SIZE)
        self.policy = HFPolicy(model, tokenizer, autocast_dtype=autocast_dtype, **policy_kwargs)
        self.model = model

    async def agenerate(
        self, messages: list[Message], *, sampling: SamplingParams, thinking: bool = True
    ) -> Completion:
        return await self.policy.agenerate(messages, sampling=sampling, thinking=thinking)

    def sync_weights(self, model: torch.nn.Module) -> None:
        if model is self.model:
            return
        with torch.no_grad():
            target = self.model.state_dict()
            for name, tensor in model.state_dict().items():
                target[name].copy_(tensor)

    async def aclose(self) -> None:
        await self.policy.aclose()


def make_engine(
    rollout: RolloutConfig, model: Any, tokenizer: Any, autocast_dtype: torch.dtype | None = None
) -> RolloutEngine:
    """The engine ``rollout.engine`` names, built with ``rollout.engine_kwargs`` (the HF engine also
    with the training forward pass's ``autocast_dtype``)."""
    if rollout.engine == "hf":
        return HFEngine(model, tokenizer, autocast_dtype, **rollout.engine_kwargs)
    engines: dict[str, Any] = {"vllm": VLLMEngine}
    if rollout.engine == "ray":
        from .ray_engine import RayEngine  # Ray itself is imported only when the engine starts

        engines["ray"] = RayEngine
    engine: RolloutEngine = engines[rollout.engine](model, tokenizer, **rollout.engine_kwargs)
    return engine
