"""MOPD teachers on their own Ray actors (``mopd.teacher_placement: ray``): one copy per teacher folder
for the whole run, however many trainer ranks there are, instead of one copy per rank.

``RayTeacher`` is a ``LogprobSource``: ``score`` ships the step's sequences to a ``TeacherWorker``
actor, which holds an ``HFScorer`` (transformers, ``mopd.teacher_engine: hf``) or a ``VLLMTeacher``
(``vllm``) on the GPU Ray gave it (else CPU), and returns their ``TokenScores``. The actor is named
after the folder and created with ``get_if_exists``, so every rank shares it. Options
(``mopd.teacher_actor_options``): Ray's ``num_cpus``/``num_gpus``/``resources``, plus
``call_timeout_s`` (default 600) and ``ready_timeout_s`` (default 300); a dead actor or a call past
its bound raises ``CascadeError`` naming the teacher.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch

from ..core import CascadeError
from .config import BatchSize, ModelConfig, WeightDtype
from .sequence import TokenScores, TrainSequence

TIMEOUT_KEYS = {"call_timeout_s": 600.0, "ready_timeout_s": 300.0}


class TeacherWorker:
    """The actor class: a frozen teacher that scores sequences (``HFScorer`` or ``VLLMTeacher``)."""

    def __init__(self, name: str, folder: str, engine: str, settings: dict[str, Any]):
        device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        self.vocab_size: int
        if engine == "vllm":
            from .vllm_teacher import VLLMTeacher

            kwargs = {"dtype": settings["dtype"], **settings["engine_kwargs"]}
            self.scorer: Any = VLLMTeacher(name, folder, temperature=settings["temperature"], **kwargs)
            self.vocab_size = self.scorer.vocab_size
        else:
            from .model import load_model
            from .sources import HFScorer

            config = ModelConfig(
                path=folder, dtype=settings["dtype"], device=str(device), gradient_checkpointing=False
            )
            model, _ = load_model(config)
            self.vocab_size = model.get_output_embeddings().weight.shape[0]
            self.scorer = HFScorer(
                name,
                model,
                pad_id=settings["pad_id"],
                micro_batch_size=settings["micro_batch_size"],
                temperature=settings["temperature"],
            )

    def ready(self) -> int:
        return self.vocab_size

    def score(self, sequences: list[TrainSequence]) -> list[TokenScores]:
        scores: list[TokenScores] = self.scorer.score(sequences)
        return scores


class RayTeacher:
    """A ``LogprobSource`` scoring through a shared ``TeacherWorker`` actor."""

    def __init__(
        self,
        name: str,
        folder: str,
        *,
        engine: str,
        dtype: WeightDtype,
        temperature: float,
        micro_batch_size: BatchSize,
        pad_id: int,
        engine_kwargs: dict[str, Any],
        actor_options: dict[str, Any],
        address: str | None = "local",
    ):
        from cascade_envs.distributed import session

        options = dict(actor_options)
        bounds = {key: float(options.pop(key, default)) for key, default in TIMEOUT_KEYS.items()}
        self.name, self.folder = name, folder
        self.call_timeout_s = bounds["call_timeout_s"]
        self._ray = ray = session.connect(address)
        self._session = session
        settings = {
            "dtype": dtype,
            "temperature": temperature,
            "micro_batch_size": micro_batch_size,
            "pad_id": pad_id,
            "engine_kwargs": engine_kwargs,
        }
        options.setdefault("num_cpus", 1)
        if "num_gpus" not in options and ray.cluster_resources().get("GPU", 0) > 0:
            options["num_gpus"] = 1
        actor_name = "cascade-teacher-" + hashlib.sha1(folder.encode()).hexdigest()[:12]
        self.actor = (
            ray.remote(TeacherWorker)
            .options(name=actor_name, get_if_exists=True, max_restarts=0, **options)
            .remote(name, folder, engine, settings)
        )
        try:
            self.vocab_size: int = self._get(self.actor.ready.remote(), bounds["ready_timeout_s"], "start")
        except BaseException:
            self.close()
            raise

    def _get(self, ref: Any, timeout_s: float, what: str) -> Any:
        ray = self._ray
        try:
            return ray.get(ref, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref)
            raise CascadeError(
                f"{self.name}: teacher actor {what} did not finish within {timeout_s:g} s"
            ) from None
        except ray.exceptions.RayError as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            raise CascadeError(
                f"{self.name}: teacher actor {what} failed: {lines[-1] if lines else exc}"
            ) from None

    def score(self, sequences: Sequence[TrainSequence]) -> list[TokenScores]:
        if not sequences:
            return []
        scores: list[TokenScores] = self._get(
            self.actor.score.remote(list(sequences)), self.call_timeout_s, "scoring"
        )
        return scores

    def tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.folder)

    def close(self) -> None:
        """Stop the actor (every rank's ``RayTeacher`` shares it: call on one rank at the end of the run)."""
        self._ray.kill(self.actor, no_restart=True)
        self._session.release()
