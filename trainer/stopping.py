"""Stopping a run early without losing work: SIGTERM (a scheduler's preemption or time limit, ``docker
stop``, Kubernetes, systemd) lets the step in progress finish, then the trainer writes a checkpoint and
stops; ``cascade-envs train`` exits ``STOPPED_EXIT_CODE``, and the same command resumes.

SIGTERM is a request, so more of them change nothing (a scheduler may signal every process of a job);
SIGINT (Ctrl-C) still stops at once, and SIGKILL is what a grace period ends in. A launcher tells its
ranks through a file (``STOP_FILE_ENV``, torchrun's), which a rank still loading its model sees too, or
through a source of its own (``stop_source``, Ray's); the ranks agree after each step, so all of them
stop after the same one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

from ..core import CascadeError

STOPPED_EXIT_CODE = 128 + signal.SIGTERM
"""The exit code of a run stopped by SIGTERM after its checkpoint (a shell's code for SIGTERM): not 0,
so a scheduler or a Kubernetes Job sees that the run has steps left and can start it again."""
STOP_FILE_ENV = "CASCADE_ENVS_STOP_FILE"
"""Names a file whose appearance asks the run to stop as SIGTERM does (how ``launch`` tells its ranks)."""

_signalled = threading.Event()
_sources: list[Callable[[], bool]] = []


class TrainingStopped(CascadeError):
    """The run stopped on request after a checkpoint; the message names the step and the checkpoint."""


def stop_requested() -> bool:
    """Whether SIGTERM arrived while ``sigterm_requests_stop`` was active, the stop file exists, or a
    ``stop_source`` says so."""
    path = os.environ.get(STOP_FILE_ENV)
    return _signalled.is_set() or bool(path and os.path.exists(path)) or any(ask() for ask in _sources)


@contextlib.contextmanager
def stop_source(ask: Callable[[], bool]) -> Iterator[None]:
    """While active, ``stop_requested()`` also asks ``ask`` (a launcher's channel to its ranks)."""
    _sources.append(ask)
    try:
        yield
    finally:
        _sources.remove(ask)


@contextlib.contextmanager
def sigterm_requests_stop(on_signal: Callable[[], object] | None = None) -> Iterator[None]:
    """While active, SIGTERM sets ``stop_requested()`` and calls ``on_signal`` instead of ending the
    process. Once it came, the request stands: SIGTERM is ignored from then on, so that more of them
    cannot kill the process during its last writes or its exit; else the previous handler comes back.
    Only the main thread can catch signals: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: object) -> None:
        _signalled.set()
        if on_signal is not None:
            on_signal()

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        if _signalled.is_set():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
