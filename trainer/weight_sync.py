"""Weight sync from the (possibly sharded) trainer model to rollout engines in Ray actors.

**Gather per bucket.** ``gathered_buckets`` walks the model's parameters in order and gathers each
FSDP2-sharded one (a ``DTensor``) to a full tensor with ``full_tensor()``, a collective every rank
joins; the full tensors are kept only on the sending rank (rank 0), one bucket of ``bucket_mb`` at a
time, so the extra memory is one bucket, never a second model. Buckets never mix dtypes.

**Transports** (``rollout.engine_kwargs.weight_sync``), from the sending rank to every engine actor:

- ``object_store``: the bucket is ``ray.put`` once (moved to CPU) and every actor loads the same
  object; at most one bucket is in flight. Works everywhere Ray does.
- ``collective``: a process group of its own (rank 0: the trainer; ranks 1..N: the engine actors),
  built from a ``TCPStore`` without touching the trainer's default group: ``gloo`` on CPU,
  ``nccl`` on GPU. Each bucket is one flat tensor broadcast from rank 0 (the actors learn the
  names, shapes and dtype from a small control call that runs alongside).

Every remote call and every collective has a time bound (``timeout_s``).
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..core import CascadeError

Bucket = list[tuple[str, torch.Tensor]]
TRANSPORTS = ("object_store", "collective")


def trainer_rank() -> int:
    """This process's rank in the trainer's default process group (0 when there is none)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a parameter (a collective for a sharded ``DTensor``)."""
    full = getattr(tensor, "full_tensor", None)
    return (full() if callable(full) else tensor).detach()


def gathered_buckets(model: Any, bucket_mb: float, *, keep: bool) -> Iterator[Bucket]:
    """``model``'s parameters as full tensors in buckets of about ``bucket_mb`` MiB.

    Every rank must iterate (a sharded parameter is gathered collectively); ``keep`` is False on
    ranks that do not send, which then yield empty buckets and free each tensor at once.
    """
    named = model.named_parameters() if hasattr(model, "named_parameters") else model
    limit = bucket_mb * 2**20
    bucket: Bucket = []
    size = 0
    for name, param in named:
        tensor = _full(param)
        if bucket and keep and tensor.dtype != bucket[-1][1].dtype:
            yield bucket
            bucket, size = [], 0
        if keep:
            bucket.append((name, tensor))
            size += tensor.numel() * tensor.element_size()
        if size >= limit:
            yield bucket
            bucket, size = [], 0
    if bucket or not keep:
        yield bucket


@dataclass(frozen=True)
class BucketMeta:
    """What a receiver needs to split a broadcast flat tensor back into named tensors."""

    names: list[str]
    shapes: list[tuple[int, ...]]
    dtype: torch.dtype

    @classmethod
    def of(cls, bucket: Bucket) -> BucketMeta:
        return cls([n for n, _ in bucket], [tuple(t.shape) for _, t in bucket], bucket[0][1].dtype)

    @property
    def numel(self) -> int:
        return sum(int(torch.Size(s).numel()) for s in self.shapes)

    def split(self, flat: torch.Tensor) -> Bucket:
        sizes = [int(torch.Size(s).numel()) for s in self.shapes]
        parts = flat.split(sizes)
        return [(n, p.view(s)) for n, p, s in zip(self.names, parts, self.shapes, strict=True)]


def flatten(bucket: Bucket, device: torch.device) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for _, t in bucket]).to(device)


def free_port() -> tuple[str, int]:
    """This node's address and a TCP port free on it now."""
    host = socket.gethostbyname(socket.gethostname())
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return host, int(sock.getsockname()[1])


def sync_group(
    host: str, port: int, rank: int, size: int, backend: str, timeout_s: float, device: torch.device
) -> Any:
    """A process group of ``size`` ranks of its own (the default group is left alone).

    Rank 0 hosts the ``TCPStore``; ``backend`` is ``gloo`` or ``nccl``.
    """
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, size, rank == 0, timeout=timeout, wait_for_workers=False)
    prefixed = dist.PrefixStore("cascade-weight-sync", store)
    group: Any
    if backend == "gloo":
        group = dist.ProcessGroupGloo(prefixed, rank, size, timeout)
    elif backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        group = dist.ProcessGroupNCCL(prefixed, rank, size, options)
    else:
        raise CascadeError(f"weight sync backend must be gloo or nccl, got {backend!r}")
    return _Group(group, store, device, timeout)


class _Group:
    """A bare process group and its store: broadcasts with a deadline."""

    def __init__(self, group: Any, store: Any, device: torch.device, timeout: datetime.timedelta):
        self.group, self.store, self.device, self.timeout = group, store, device, timeout

    def broadcast(self, tensor: torch.Tensor) -> None:
        import torch.distributed as dist

        options = dist.BroadcastOptions()
        options.rootRank = 0
        work = self.group.broadcast([tensor], options)
        if not work.wait(self.timeout):
            raise CascadeError(f"weight sync broadcast did not finish within {self.timeout}")

    def close(self) -> None:
        shutdown = getattr(self.group, "shutdown", None)
        if callable(shutdown):
            shutdown()
