"""The ranks of a sharded run: process-group setup, collectives with a bound, slices, config agreement.

Every collective runs on the process group created by ``init_process_group`` with
``train.collective_timeout_s`` as its timeout (gloo and NCCL both honour it), and a failed or timed
out collective becomes one ``RankError`` line naming what was being exchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ...core import CascadeError
from ..config import ConfigError

ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class RankError(CascadeError):
    """A rank stopped answering (died, hung past the timeout) or a collective failed."""


@dataclass(frozen=True)
class RankEnv:
    """What torchrun (or a Ray worker) tells a rank through the environment."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    @classmethod
    def from_environ(cls) -> RankEnv:
        missing = [name for name in ENV_VARS if not os.environ.get(name)]
        if missing:
            raise CascadeError(
                f"a rank needs {', '.join(ENV_VARS)} in its environment (missing: {', '.join(missing)}); "
                "start it with torchrun or cascade-envs train --nproc N"
            )
        env = cls(
            int(os.environ["RANK"]),
            int(os.environ["WORLD_SIZE"]),
            int(os.environ["LOCAL_RANK"]),
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
        )
        if not 0 <= env.rank < env.world_size:
            raise CascadeError(f"RANK={env.rank} is outside WORLD_SIZE={env.world_size}")
        return env


def init_process_group(env: RankEnv, timeout_s: float) -> str:
    """Join the run's process group (NCCL on GPU, gloo on CPU), bounded by ``timeout_s``; the backend."""
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(env.local_rank)
    if not dist.is_initialized():
        dist.init_process_group(
            backend,
            init_method="env://",  # MASTER_ADDR/MASTER_PORT; under torchrun, its agent's store
            rank=env.rank,
            world_size=env.world_size,
            timeout=timedelta(seconds=timeout_s),
        )
    return backend


def group_slice(n: int, world_size: int, rank: int) -> range:
    """Rank ``rank``'s contiguous share of ``n`` items: sizes differ by at most one, none is split."""
    return range(rank * n // world_size, (rank + 1) * n // world_size)


class Ranks:
    """This rank's view of the group: bounded collectives that fail with one line."""

    def __init__(self, timeout_s: float, group: Any = None):
        """``group``: the process group (default: the run's), created with ``timeout_s`` as its timeout."""
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.timeout_s = timeout_s

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _failed(self, what: str, exc: Exception) -> RankError:
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return RankError(
            f"rank {self.rank}: exchanging {what} failed: another rank stopped or did not answer within "
            f"train.collective_timeout_s={self.timeout_s:g}s ({detail})"
        )

    def gather(self, value: Any, what: str) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order."""
        out: list[Any] = [None] * self.world_size
        try:
            dist.all_gather_object(out, value, group=self.group)
        except Exception as exc:  # gloo/NCCL raise RuntimeError and its subclasses (DistBackendError, ...)
            raise self._failed(what, exc) from exc
        return out

    def sum(self, values: dict[str, float], what: str) -> dict[str, float]:
        """Key-wise sums over ranks, added in rank order (keys one rank lacks count as 0)."""
        total: dict[str, float] = {}
        for part in self.gather(values, what):
            for key, value in part.items():
                total[key] = total.get(key, 0.0) + value
        return total

    def barrier(self, what: str) -> None:
        self.gather(None, what)

    def check_config(self, config: dict[str, Any]) -> None:
        """Every rank runs the same config; else ``ConfigError`` naming the keys that differ."""
        flat = _flatten(config)
        digest = hashlib.sha256(json.dumps(flat, sort_keys=True, default=repr).encode()).hexdigest()
        digests = self.gather(digest, "config hashes")
        if len(set(digests)) == 1:
            return
        configs = self.gather(flat, "configs")
        differing = sorted(
            {
                k
                for other in configs[1:]
                for k in set(configs[0]) | set(other)
                if configs[0].get(k) != other.get(k)
            }
        )
        ranks = [r for r, d in enumerate(digests) if d != digests[0]]
        raise ConfigError(
            f"the ranks disagree on the config: rank(s) {', '.join(map(str, ranks))} differ from rank 0 in "
            f"{', '.join(differing)}; give every rank the same config and overrides"
        )


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}
