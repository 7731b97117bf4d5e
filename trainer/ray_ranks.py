"""Trainer ranks on Ray: one worker actor per rank in a placement group, launched as ``torchrun`` would.

``launch_ranks(entry, world_size)`` reserves ``world_size`` bundles (``{CPU: n}`` or ``{CPU: n, GPU: 1}``),
starts a ``RankWorker`` in each, picks a free port on rank 0's node and runs ``entry`` in every
worker with the variables ``torchrun`` sets: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` (on GPU also ``CUDA_VISIBLE_DEVICES``: the
node's GPUs of this run, so ``cuda:LOCAL_RANK`` is the rank's own). ``entry`` is
``"package.module:function"`` (called with ``args``; its return values are collected, rank order) or
``"package.module"`` (run as ``python -m`` with ``args`` as its argv; its exit codes are collected).

Failure rule: the first rank that raises or dies stops the run: the other workers are killed (a
rank blocked in a collective would otherwise wait for its timeout) and ``RankFailed`` says which rank
failed, on which node, and why, in one line. The whole run has a time bound (``timeout_s``).

Stop rule: while the driver waits, a stop request of its own (``stopping.stop_requested``: its
SIGTERM) is passed to every rank through a ``StopFlag`` actor that the ranks ask after each step, on
whatever node they run; a rank that then stops with its checkpoint returns ``STOPPED_EXIT_CODE``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import runpy
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..core import CascadeError
from .stopping import STOP_FILE_ENV, STOPPED_EXIT_CODE, sigterm_requests_stop, stop_requested, stop_source
from .weight_sync import free_port

log = logging.getLogger("cascade_envs.trainer")

STOP_POLL_S = 1.0
"""How often the waiting driver looks for its own stop request."""
STOP_ASK_TIMEOUT_S = 30.0
"""A rank's bound on asking the ``StopFlag`` (after it, the rank goes on as if no stop was asked)."""


class RankFailed(CascadeError):
    """A trainer rank raised, died or ran past the time bound; the other ranks were stopped."""


class StopFlag:
    """The actor class of a run's stop request: the driver sets it, the ranks read it after each step."""

    def __init__(self) -> None:
        self.requested = False

    def request(self) -> None:
        self.requested = True

    def is_requested(self) -> bool:
        return self.requested


def _asker(ray: Any, flag: Any) -> Any:
    """A rank's ``stop_source``: the flag's answer (an unanswered ask is logged and read as no)."""

    def ask() -> bool:
        try:
            return bool(ray.get(flag.is_requested.remote(), timeout=STOP_ASK_TIMEOUT_S))
        except Exception as exc:  # the driver's flag is gone or slow: never stop a run over it
            log.warning("could not ask the driver whether to stop (%s); going on", exc)
            return False

    return ask


class RankWorker:
    """The actor class of one trainer rank."""

    def info(self) -> dict[str, Any]:
        import ray

        context = ray.get_runtime_context()
        return {
            "node": context.get_node_id(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "gpus": [str(g) for g in ray.get_gpu_ids()],
        }

    def address(self) -> tuple[str, int]:
        """This node's address and a port free on it (rank 0's rendezvous)."""
        return free_port()

    def run(self, entry: str, args: list[Any], env: dict[str, str], stop_flag: Any) -> Any:
        import ray

        os.environ.update(env)
        module, _, function = entry.partition(":")
        with stop_source(_asker(ray, stop_flag)):
            if function:
                return getattr(importlib.import_module(module), function)(*args)
            sys.argv = [module, *args]
            tail = _Tail(sys.stderr)
            try:
                with contextlib.redirect_stderr(tail):
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as exc:
                if exc.code == STOPPED_EXIT_CODE:
                    return exc.code
                if exc.code not in (None, 0):
                    said = f": {tail.last}" if tail.last else ""
                    raise RuntimeError(f"{module} exited with {exc.code}{said}") from None
            return 0


class _Tail(io.TextIOBase):
    """A stderr that passes everything on and keeps the last non-empty line (a rank's error line)."""

    def __init__(self, stream: Any):
        self.stream, self.last, self._partial = stream, "", ""

    def write(self, text: str) -> int:
        self.stream.write(text)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        self.last = next((line.strip() for line in reversed(lines) if line.strip()), self.last)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def rank_environments(
    infos: list[dict[str, Any]], master: tuple[str, int], gpus: bool
) -> list[dict[str, str]]:
    """torchrun's variables for each rank, given where Ray placed the workers (rank order)."""
    by_node: dict[str, list[int]] = {}
    for rank, info in enumerate(infos):
        by_node.setdefault(info["node"], []).append(rank)
    envs = []
    for rank, info in enumerate(infos):
        local = by_node[info["node"]]
        env = {
            "RANK": str(rank),
            "WORLD_SIZE": str(len(infos)),
            "LOCAL_RANK": str(local.index(rank)),
            "LOCAL_WORLD_SIZE": str(len(local)),
            "MASTER_ADDR": master[0],
            "MASTER_PORT": str(master[1]),
        }
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(infos[r]["gpus"][0] for r in local)
        envs.append(env)
    return envs


def launch_ranks(
    entry: str,
    world_size: int,
    args: Sequence[Any] = (),
    *,
    address: str | None = "local",
    num_cpus: float = 1,
    gpus: bool | None = None,
    placement_strategy: str = "PACK",
    env: dict[str, str] | None = None,
    timeout_s: float | None = 3600.0,
    ready_timeout_s: float = 300.0,
) -> list[Any]:
    """Run ``entry`` on ``world_size`` Ray-placed ranks; the ranks' results in rank order (see the module).

    ``timeout_s`` bounds the whole run (``None``: no bound; a training run's collectives have their own).
    """
    from cascade_envs.distributed import placement, session

    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise CascadeError(f"world size must be a whole number >= 1, got {world_size!r}")
    ray = session.connect(address)
    group = flag = None
    workers: list[Any] = []
    try:
        flag = ray.remote(StopFlag).options(num_cpus=0, max_restarts=0).remote()
        use_gpus = ray.cluster_resources().get("GPU", 0) > 0 if gpus is None else gpus
        bundle = {"CPU": num_cpus, **({"GPU": 1} if use_gpus else {})}
        group = placement.reserve_bundles(
            ray, [bundle] * world_size, placement_strategy, ready_timeout_s, "trainer ranks"
        )
        remote = ray.remote(RankWorker)
        workers = [
            remote.options(
                num_cpus=num_cpus,
                num_gpus=bundle.get("GPU", 0),
                max_restarts=0,
                **placement.bundle_options(group, r),
            ).remote()
            for r in range(world_size)
        ]
        infos = _get_all(ray, [w.info.remote() for w in workers], ready_timeout_s, "start", None)
        master = _get_all(ray, [workers[0].address.remote()], ready_timeout_s, "rendezvous", infos)[0]
        envs = rank_environments(infos, master, use_gpus)
        refs = [
            w.run.remote(entry, list(args), {**(env or {}), **e}, flag)
            for w, e in zip(workers, envs, strict=True)
        ]
        return _get_all(ray, refs, timeout_s, "run", infos, flag)
    finally:
        for actor in [*workers, flag]:
            if actor is not None:
                ray.kill(actor, no_restart=True)
        if group is not None:
            placement.remove(group)
        session.release()


def _get_all(
    ray: Any,
    refs: list[Any],
    timeout_s: float | None,
    what: str,
    infos: list[dict[str, Any]] | None,
    stop_flag: Any = None,
) -> list[Any]:
    """Every result, failing at the first rank that fails (``RankFailed`` naming it); a stop request of
    this process's is passed on to ``stop_flag`` while waiting."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pending = list(refs)
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        wait_s = left if stop_flag is None else STOP_POLL_S if left is None else min(left, STOP_POLL_S)
        done, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
        if stop_flag is not None and stop_requested():
            stop_flag.request.remote()
            stop_flag = None  # once is enough
        if not done and (deadline is None or time.monotonic() < deadline):
            continue
        if not done:
            late = [refs.index(r) for r in pending]
            raise RankFailed(
                f"trainer rank(s) {late} did not finish {what} within {timeout_s} s; all ranks stopped"
            )
        try:
            ray.get(done[0])
        except ray.exceptions.RayActorError as exc:
            raise _failure(refs.index(done[0]), "died", exc, what, infos) from None
        except ray.exceptions.RayTaskError as exc:
            # a rank whose peer died usually fails first (its collective breaks): name the dead one
            dead = _first_death(ray, refs, pending)
            if dead is not None:
                raise _failure(dead[0], "died", dead[1], what, infos) from None
            raise _failure(refs.index(done[0]), "failed", exc, what, infos) from None
    return list(ray.get(refs))


DEATH_GRACE_S = 15.0
"""How long, after a rank raised, the others get to show whether one of them died (the cause)."""


def _first_death(ray: Any, refs: list[Any], pending: list[Any]) -> tuple[int, BaseException] | None:
    done, _ = ray.wait(pending, num_returns=len(pending), timeout=DEATH_GRACE_S) if pending else ([], [])
    for ref in done:
        try:
            ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            return refs.index(ref), exc
        except Exception:  # only a death is of interest here
            continue
    return None


def _failure(
    rank: int, how: str, exc: BaseException, what: str, infos: list[dict[str, Any]] | None
) -> RankFailed:
    where = f" ({infos[rank]['host']}, pid {infos[rank]['pid']})" if infos else ""
    return RankFailed(f"trainer rank {rank}{where} {how} during {what}: {_last_line(exc)}; all ranks stopped")


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def launch_on_ray(
    config: Any,
    config_path: str | None,
    overrides: list[str],
    worker: str | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """``cascade-envs train`` with ``train.launcher: ray``: ``train.world_size`` ranks on the Ray cluster of
    ``ray.address`` (a local one when unset), each running ``cascade-envs train`` as a torchrun worker
    would (``RANK`` set: ``run_rank``); the exit code."""
    from .parallel.launch import WORKER, _last_good

    argv = ["train"] + ([config_path] if config_path is not None else [])
    for text in overrides:
        argv += ["--set", text]
    address = config.ray.address or "local"
    ranks_env = {**(env or {}), STOP_FILE_ENV: ""}  # the ranks hear this driver's stop through the flag
    try:
        with sigterm_requests_stop():
            codes = launch_ranks(
                worker or WORKER,
                config.train.world_size,
                argv,
                address=address,
                env=ranks_env,
                timeout_s=None,
            )
    except RankFailed as exc:
        print(f"cascade-envs train: {exc}; training stopped, {_last_good(config)}", file=sys.stderr)
        return 1
    if STOPPED_EXIT_CODE in codes:
        print(f"cascade-envs train: stopped by SIGTERM; {_last_good(config)}", file=sys.stderr)
        return STOPPED_EXIT_CODE
    return 0
