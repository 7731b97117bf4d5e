"""``RayEngine``: rollout engines (HF or vLLM) as Ray actors in a placement group (``rollout.engine: ray``).

Settings (``rollout.engine_kwargs``; see ``RaySettings``): ``backend`` (``hf``/``vllm``),
``num_engines``, ``tensor_parallel_size`` (vLLM), ``colocate`` (share the trainer's GPUs, vLLM sleep
mode during the optimizer phase) or own resources, the weight-sync transport and bucket size, and
time bounds. One bundle per engine: ``{GPU: tp, CPU: n}`` on a GPU cluster (``{GPU: gpu_fraction}``
when colocated), ``{CPU: n}`` on CPU. Generations go to the engine with the fewest in flight.

With several trainer ranks, rank 0 starts the actors (named ``<name>-<i>``) and the others attach by
name; ``sync_weights`` runs on every rank (a sharded parameter is gathered collectively) and rank 0
sends (``weight_sync.py``). An engine actor that dies fails its calls and the next step with one
line naming it (``failure``); the run does not go on with fewer engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from ..core import CascadeError, Completion, Message
from ..policy import PolicyError, SamplingParams
from .engine_actor import BACKENDS, EngineWorker
from .vllm_setup import model_folder
from .weight_sync import (
    TRANSPORTS,
    BucketMeta,
    flatten,
    free_port,
    gathered_buckets,
    sync_group,
    trainer_rank,
)

log = logging.getLogger("cascade_envs.trainer.ray_engine")


def run_namespace() -> str | None:
    """The engine actors' Ray namespace in a multi-rank run, one per run: ranks started by torchrun are
    separate Ray drivers (each in an anonymous namespace of its own) and find rank 0's actors by name
    there; the rendezvous address tells concurrent runs on one cluster apart. A single process keeps
    its driver's own namespace (``None``)."""
    rendezvous = [os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT")]
    return "cascade-envs-{}:{}".format(*rendezvous) if all(rendezvous) else None


class EngineDied(CascadeError):
    """A rollout engine actor died or stopped answering: the run cannot go on with its weights lost."""


@dataclass
class RaySettings:
    """``rollout.engine_kwargs`` of ``rollout.engine: ray``."""

    backend: Literal["hf", "vllm"] = "hf"
    num_engines: int = 1
    tensor_parallel_size: int = 1
    colocate: bool = False
    """Share the trainer's GPUs (``gpu_fraction`` of one each; vLLM sleeps while the trainer steps)."""
    gpu_fraction: float = 0.5
    num_cpus: float = 1
    placement_strategy: str = "PACK"
    weight_sync: Literal["auto", "object_store", "collective"] = "auto"
    """``auto``: ``collective`` (NCCL) for engines on GPUs of their own, else ``object_store`` (CPU, and
    colocated engines: NCCL cannot put two ranks of one group on one GPU; CUDA IPC is not done yet)."""
    bucket_mb: float = 256
    call_timeout_s: float = 600.0
    sync_timeout_s: float = 600.0
    ready_timeout_s: float = 300.0
    address: str | None = "local"
    name: str = "cascade-rollout"
    threads: int = 0
    """Threads of each engine process, set as its OMP_NUM_THREADS (0: Ray's default)."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """Passed to each engine (``HFPolicy`` or ``VLLMEngine``)."""

    @classmethod
    def parse(cls, kwargs: dict[str, Any]) -> RaySettings:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise CascadeError(
                f"rollout.engine_kwargs: unknown key(s) {unknown} for engine ray (known: {sorted(names)})"
            )
        settings = cls(**kwargs)
        settings.check()
        return settings

    def check(self) -> None:
        where = "rollout.engine_kwargs"
        if self.backend not in BACKENDS:
            raise CascadeError(f"{where}.backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.weight_sync not in ("auto", *TRANSPORTS):
            raise CascadeError(
                f"{where}.weight_sync must be auto, object_store or collective, got {self.weight_sync!r}"
            )
        for key in ("num_engines", "tensor_parallel_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CascadeError(f"{where}.{key} must be a whole number >= 1, got {value!r}")
        for key in ("call_timeout_s", "sync_timeout_s", "ready_timeout_s", "num_cpus", "bucket_mb"):
            if not isinstance(getattr(self, key), (int, float)) or getattr(self, key) <= 0:
                raise CascadeError(f"{where}.{key} must be a positive number, got {getattr(self, key)!r}")
        if self.backend == "hf" and self.tensor_parallel_size != 1:
            raise CascadeError(f"{where}.tensor_parallel_size: the hf backend has none; use backend: vllm")
        if not 0 < self.gpu_fraction <= 1:
            raise CascadeError(f"{where}.gpu_fraction must be in (0, 1], got {self.gpu_fraction!r}")
        if self.colocate and self.weight_sync == "collective":
            raise CascadeError(
                f"{where}.weight_sync: collective (NCCL) cannot reach an engine on the trainer's own GPU; "
                "use object_store (or auto) with colocate"
            )
        if self.colocate and self.tensor_parallel_size > 1:
            raise CascadeError(f"{where}: colocate shares one GPU per engine; tensor_parallel_size must be 1")

    def thread_env(self) -> dict[str, Any]:
        """Actor options that give the engine process ``threads`` threads: its OMP_NUM_THREADS, which
        torch and vLLM's CPU attention both read (a per-thread ``torch.set_num_threads`` would leave
        vLLM's threads disagreeing)."""
        if not self.threads:
            return {}
        return {"runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(self.threads)}}}

    def bundle(self, gpus: bool) -> dict[str, float]:
        if not gpus:
            return {"CPU": self.num_cpus}
        gpu = self.gpu_fraction if self.colocate else self.tensor_parallel_size
        return {"CPU": self.num_cpus, "GPU": gpu}


class RayEngine:
    """A ``RolloutEngine`` whose generations run in ``num_engines`` Ray actors (``EngineWorker``)."""

    def __init__(self, model: Any, tokenizer: Any = None, **kwargs: Any):
        from cascade_envs.distributed import placement, session

        self.settings = s = RaySettings.parse(kwargs)
        self.folder = str(model_folder(model))
        self.rank = trainer_rank()
        self.namespace = run_namespace()
        if self.rank > 0 and s.address == "local" and not _ray_initialized():
            raise CascadeError(
                "rollout.engine: ray on several ranks needs every rank on one Ray cluster: set "
                "rollout.engine_kwargs.address: auto (a running cluster) or train.launcher: ray"
            )
        self._ray = ray = session.connect(s.address)
        self._session = session
        self.gpus = ray.cluster_resources().get("GPU", 0) > 0
        self.transport = (
            s.weight_sync
            if s.weight_sync != "auto"
            else ("collective" if self.gpus and not s.colocate else "object_store")
        )
        inner = dict(s.engine_kwargs)
        if s.backend == "vllm":
            inner.setdefault("tensor_parallel_size", s.tensor_parallel_size)
            inner.setdefault("enable_sleep_mode", s.colocate)
        self.group: Any = None
        self.failure: str | None = None
        self.last_sync: dict[str, float] = {}
        self._sync_group: Any = None
        self._closed = False
        try:
            if self.rank == 0:
                bundle = s.bundle(self.gpus)
                self.group = placement.reserve_bundles(
                    ray, [bundle] * s.num_engines, s.placement_strategy, s.ready_timeout_s, "rollout engines"
                )
                remote = ray.remote(EngineWorker)
                self.actors = [
                    remote.options(
                        name=f"{s.name}-{i}",
                        namespace=self.namespace,
                        num_cpus=bundle["CPU"],
                        num_gpus=bundle.get("GPU", 0),
                        max_concurrency=256,
                        max_restarts=0,
                        **placement.bundle_options(self.group, i),
                        **s.thread_env(),
                    ).remote(s.backend, self.folder, inner)
                    for i in range(s.num_engines)
                ]
            else:
                self.actors = [self._attach(f"{s.name}-{i}") for i in range(s.num_engines)]
            self.where = self._get([a.ready.remote() for a in self.actors], s.ready_timeout_s, "start")
        except BaseException:
            self._shutdown()
            raise
        self.load = [0] * len(self.actors)
        log.info(
            "rollout engines on Ray: %s",
            ", ".join(f"{w['host']}:{w['pid']} ({w['device']})" for w in self.where),
        )
        if hasattr(model, "named_parameters"):  # every rank: a sharded parameter is gathered collectively
            self.sync_weights(model)

    def _attach(self, name: str) -> Any:
        deadline = time.monotonic() + self.settings.ready_timeout_s
        while True:
            try:
                return self._ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                if time.monotonic() > deadline:
                    raise EngineDied(
                        f"rollout engine actor {name} did not appear within {self.settings.ready_timeout_s:g} s"
                    ) from None
                time.sleep(0.2)

    def _get(self, refs: list[Any], timeout_s: float, what: str) -> list[Any]:
        """``ray.get`` with a deadline; a dead actor or a timeout becomes ``EngineDied`` (and ``failure``)."""
        ray = self._ray
        try:
            return list(ray.get(refs, timeout=timeout_s))
        except ray.exceptions.GetTimeoutError:
            self.failure = f"rollout engine {what} did not finish within {timeout_s:g} s"
        except ray.exceptions.RayActorError as exc:
            self.failure = f"a rollout engine actor died during {what}: {_first_line(exc)}"
        except ray.exceptions.RayTaskError as exc:
            raise CascadeError(f"rollout engine {what} failed: {_first_line(exc)}") from None
        raise EngineDied(self.failure)

    # ----- generation -----------------------------------------------------------------------------

    async def agenerate(
        self, messages: list[Message], *, sampling: SamplingParams, thinking: bool = True
    ) -> Completion:
        if self.failure:
            raise EngineDied(self.failure)
        if self._closed:
            raise PolicyError("this RayEngine was closed")
        index = min(range(len(self.load)), key=self.load.__getitem__)
        self.load[index] += 1
        ray = self._ray
        ref = self.actors[index].generate.remote(messages, sampling, thinking)
        try:
            result: Completion = await asyncio.wait_for(
                asyncio.wrap_future(ref.future()), self.settings.call_timeout_s
            )
            return result
        except TimeoutError:
            ray.cancel(ref)
            raise PolicyError(
                f"rollout engine {index} did not answer within {self.settings.call_timeout_s:g} s"
            ) from None
        except ray.exceptions.RayActorError as exc:
            self.failure = f"rollout engine {index} ({self.where[index]['host']}:{self.where[index]['pid']}) died: {_first_line(exc)}"
            raise EngineDied(self.failure) from None
        except ray.exceptions.RayTaskError as exc:
            raise PolicyError(f"rollout engine {index}: {_first_line(exc)}") from None
        finally:
            self.load[index] -= 1

    # ----- weights --------------------------------------------------------------------------------

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Send ``model``'s weights to every engine, bucket by bucket (every trainer rank calls this)."""
        if self.failure:
            raise EngineDied(self.failure)
        start = time.perf_counter()
        keep = self.rank == 0
        sent = tensors = buckets = 0
        for bucket in gathered_buckets(model, self.settings.bucket_mb, keep=keep):
            if not keep or not bucket:
                continue
            if self.transport == "collective":
                self._broadcast(bucket)
            else:
                self._put(bucket)
            sent += sum(t.numel() * t.element_size() for _, t in bucket)
            tensors += len(bucket)
            buckets += 1
        if keep:
            self._get(
                [a.finish_sync.remote() for a in self.actors], self.settings.sync_timeout_s, "weight sync"
            )
        seconds = time.perf_counter() - start
        self.last_sync = {"sync_s": seconds, "mib": sent / 2**20, "buckets": buckets, "tensors": tensors}
        if keep:
            log.info(
                "weight sync: %d tensors (%.1f MiB, %d buckets) to %d engine(s) by %s in %.3f s",
                tensors,
                sent / 2**20,
                buckets,
                len(self.actors),
                self.transport,
                seconds,
            )

    def _put(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        ref = self._ray.put([(name, t.cpu()) for name, t in bucket])
        self._get(
            [a.load_bucket.remote(ref) for a in self.actors], self.settings.sync_timeout_s, "weight sync"
        )

    def _broadcast(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        device = bucket[0][1].device
        if self._sync_group is None:
            self._sync_group = self._join(device)
        refs = [a.receive_bucket.remote(BucketMeta.of(bucket)) for a in self.actors]
        self._sync_group.broadcast(flatten(bucket, device))
        self._get(refs, self.settings.sync_timeout_s, "weight sync")

    def _join(self, device: torch.device) -> Any:
        host, port = free_port()
        size = len(self.actors) + 1
        backend = "nccl" if device.type == "cuda" else "gloo"
        t = self.settings.sync_timeout_s
        refs = [a.join_group.remote(host, port, i + 1, size, backend, t) for i, a in enumerate(self.actors)]
        group = sync_group(host, port, 0, size, backend, t, device)
        self._get(refs, t, "weight-sync group set-up")
        return group

    # ----- memory and lifecycle -------------------------------------------------------------------

    def sleep(self) -> None:
        if self.settings.colocate and self.rank == 0:
            self._get([a.sleep.remote() for a in self.actors], self.settings.call_timeout_s, "sleep")

    def wake_up(self) -> None:
        if self.settings.colocate and self.rank == 0:
            self._get([a.wake_up.remote() for a in self.actors], self.settings.call_timeout_s, "wake_up")

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._shutdown()

    def _shutdown(self) -> None:
        ray = self._ray
        if self._sync_group is not None:
            self._sync_group.close()
        if self.rank == 0:
            actors = getattr(self, "actors", [])
            if actors and not self.failure:
                with contextlib.suppress(ray.exceptions.RayError):
                    ray.get([a.close.remote() for a in actors], timeout=30)
            for actor in actors:
                ray.kill(actor, no_restart=True)
            if self.group is not None:
                from cascade_envs.distributed import placement

                placement.remove(self.group)
        self._session.release()


def _ray_initialized() -> bool:
    import ray

    return bool(ray.is_initialized())


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__
