"""``EngineWorker``: one rollout engine (HF or vLLM) living in a Ray actor, fed weights by the trainer.

``RayEngine`` (``ray_engine.py``) wraps this class with ``ray.remote`` and places one per bundle of
its placement group. The worker loads its own copy of the model from the checkpoint folder (on the
GPU Ray gave it, else on CPU), generates for the trainer's runner, and takes new weights bucket by
bucket (``weight_sync.py``): the HF backend copies each bucket into its parameters at once; vLLM
gets them all in one in-place reload at ``finish_sync`` (a layer must arrive whole there).
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import torch

from ..core import CascadeError, Completion, Message
from ..policy import SamplingParams
from .weight_sync import Bucket, BucketMeta, sync_group

BACKENDS = ("hf", "vllm")


def _device() -> torch.device:
    """The GPU Ray assigned to this actor (Ray sets CUDA_VISIBLE_DEVICES), else the CPU."""
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


class EngineWorker:
    """A rollout engine in its actor: ``backend`` ``hf`` or ``vllm``, built from ``folder``.

    ``engine_kwargs`` go to ``HFPolicy`` (``max_batch_size``, ``dtype``, ``decoding``) or to
    ``VLLMEngine`` (``tensor_parallel_size``, ``gpu_memory_utilization``, ``enable_sleep_mode``...).
    """

    def __init__(self, backend: str, folder: str, engine_kwargs: dict[str, Any]):
        self.backend = backend
        self.device = _device()
        self.pending: Bucket = []
        self.group: Any = None
        kwargs = dict(engine_kwargs)
        if backend == "hf":
            from ..policies.hf import HFPolicy

            kwargs.setdefault("max_batch_size", 64)
            self.engine: Any = HFPolicy(folder, device=self.device, **kwargs)
            self.params = dict(self.engine.model.named_parameters())
        elif backend == "vllm":
            from .vllm_engine import VLLMEngine

            self.engine = VLLMEngine(folder, folder, **kwargs)
            self.params = {}
        else:
            raise CascadeError(
                f"rollout engine backend must be one of {', '.join(BACKENDS)}, got {backend!r}"
            )

    def ready(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname(), "device": str(self.device)}

    async def generate(self, messages: list[Message], sampling: SamplingParams, thinking: bool) -> Completion:
        completion: Completion = await self.engine.agenerate(messages, sampling=sampling, thinking=thinking)
        return completion

    # ----- weights --------------------------------------------------------------------------------

    def load_bucket(self, bucket: Bucket) -> int:
        """Take one bucket of ``(name, tensor)`` pairs; returns how many tensors it held."""
        if self.backend == "vllm":
            self.pending.extend(bucket)
            return len(bucket)
        unknown = [name for name, _ in bucket if name not in self.params]
        if unknown:
            raise CascadeError(f"weight sync: {len(unknown)} unknown parameter(s), e.g. {unknown[:3]}")
        with torch.no_grad():
            for name, tensor in bucket:
                target = self.params[name]
                if target.shape != tensor.shape:
                    raise CascadeError(
                        f"weight sync: {name} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}"
                    )
                target.copy_(tensor)
        return len(bucket)

    def finish_sync(self) -> None:
        """Apply what ``load_bucket`` collected (vLLM: one in-place reload of every layer)."""
        if self.backend == "vllm" and self.pending:
            pending, self.pending = self.pending, []
            self.engine.sync_weights(pending)

    async def join_group(
        self, host: str, port: int, rank: int, size: int, backend: str, timeout_s: float
    ) -> None:
        """Join the weight-sync process group (rank 0 is the trainer; see ``weight_sync.sync_group``)."""
        self.group = await asyncio.to_thread(
            sync_group, host, port, rank, size, backend, timeout_s, self.device
        )

    def receive_bucket(self, meta: BucketMeta) -> int:
        """Receive one broadcast bucket from the trainer and load it."""
        if self.group is None:
            raise CascadeError("weight sync: receive_bucket before join_group")
        flat = torch.empty(meta.numel, dtype=meta.dtype, device=self.device)
        self.group.broadcast(flat)
        return self.load_bucket(meta.split(flat))

    # ----- memory and lifecycle -------------------------------------------------------------------

    def sleep(self) -> None:
        if self.backend == "vllm":
            self.engine.sleep()

    def wake_up(self) -> None:
        if self.backend == "vllm":
            self.engine.wake_up()

    async def close(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None
        await self.engine.aclose()
