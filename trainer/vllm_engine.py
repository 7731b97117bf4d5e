"""vLLM rollout engine: in-process generation with sampled-token logprobs, weights synced in place.

Design (checked against vLLM 0.32, V1 engine):

- **In-process.** ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps vLLM's engine core in this process.
  With one worker (``UniProcExecutor``, ``tensor_parallel_size`` 1) a weight sync hands vLLM the
  trainer's tensors by reference: no pickling, no IPC, no checkpoint on disk. With tensor
  parallelism vLLM runs a worker process per rank, and a sync pickles the cast weights to each
  (one extra copy in memory while it runs; checked on CPU with 2 ranks). At scale, vLLM's NCCL
  weight-transfer engine would avoid that copy; this module does not use it.
- **Weight sync** goes through the worker's public ``reload_weights`` RPC (vLLM's in-place reload):
  it takes ``(hf_name, tensor)`` pairs in checkpoint format, re-runs each layer's post-load
  processing (e.g. fusing q/k/v, the CPU backend's weight prepacking) once the layer is complete and
  copies the result into the *existing* parameter storage, so CUDA graphs stay valid. The trainer's
  parameters are cast to vLLM's dtype/device one bucket of ``bucket_mb`` at a time, which bounds the
  extra memory of the cast. Calling the model's ``load_weights`` directly would be wrong on CPU,
  where the linear weights are repacked into kernel format after loading. The prefix cache is reset
  after every sync, since cached KV blocks were computed with the old weights.
- **Logprobs** are vLLM's ``processed_logprobs``: ``log_softmax(logits / T)`` of each sampled token,
  i.e. what the trainer computes from the same weights at the same temperature (greedy: ``T = 1``).
  With ``top_p < 1`` they are renormalised over the nucleus (the distribution actually sampled);
  the Hugging Face engine reports them over the full vocabulary. With ``top_p = 1`` both agree.
- **Concurrency.** One driver thread owns the engine loop (``add_request``/``step``), so concurrent
  ``agenerate`` calls are batched continuously by vLLM's scheduler and the event loop stays free.
  ``generate``, ``sync_weights``, ``sleep`` and ``wake_up`` take the same lock as each step.
- **Sleep mode** (GPU, ``enable_sleep_mode=True``): ``sleep()`` offloads the weights to CPU and
  drops the KV cache (level 1) so training can use the GPU; ``sync_weights`` wakes only the weights;
  ``wake_up()`` (or the next generation) restores the rest. Where vLLM has no sleep mode (CPU),
  ``sleep``/``wake_up`` log once and do nothing.

Prompts, token ids and text follow ``HFPolicy`` (chat template; ``<think></think>`` appended in
non-thinking mode; every end-of-sequence token of the tokenizer ends a sample; ids include the token
that ended generation; text stops before EOS/stop string).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import logging
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._extras import require
from ..core import CascadeError, Completion, Message
from ..policies.decoding import end_token_ids
from ..policy import ContextOverflowError, PolicyError, SamplingParams, render_chat_prompt
from .vllm_setup import checkpoint_names, in_process_vllm_environment, model_folder, reprocess_shared_weights

log = logging.getLogger("cascade_envs.trainer.vllm")


@dataclass
class _Request:
    request_id: str
    prompt_ids: list[int]
    params: Any  # vllm.SamplingParams
    future: concurrent.futures.Future


class VLLMEngine:
    """A ``RolloutEngine`` (``engine.py``) backed by an in-process ``vllm.LLM``.

    ``model`` is a local checkpoint folder or the trainer's model (a transformers
    ``PreTrainedModel`` whose ``name_or_path`` is that folder; its current weights are synced in
    at once). ``tokenizer`` (object or folder) renders the prompts; it defaults to the model's
    folder. Extra keyword arguments go to ``vllm.LLM``.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        enable_sleep_mode: bool = False,
        seed: int = 0,
        enforce_eager: bool | None = None,
        bucket_mb: int = 512,
        **llm_kwargs: Any,
    ):
        require("vllm", "the vLLM rollout engine")
        if bucket_mb < 1:
            raise ValueError(f"bucket_mb must be >= 1, got {bucket_mb}")
        trainer_model = None if isinstance(model, (str, Path)) else model
        path = model_folder(model)
        in_process_vllm_environment()
        import vllm
        from vllm.platforms import current_platform

        self._vllm = vllm
        self.bucket_mb = bucket_mb
        self.sleep_supported = bool(enable_sleep_mode) and current_platform.is_sleep_mode_available()
        if enable_sleep_mode and not self.sleep_supported:
            log.info(
                "vLLM has no sleep mode on %s: sleep()/wake_up() will do nothing",
                current_platform.device_type,
            )
        if enforce_eager is None:
            enforce_eager = current_platform.is_cpu()
        tokenizer_source = (
            tokenizer if isinstance(tokenizer, (str, Path)) else getattr(tokenizer, "name_or_path", None)
        )
        llm_kwargs.setdefault("generation_config", "vllm")  # explicit sampling only, no model defaults
        self.llm = vllm.LLM(
            model=str(path),
            tokenizer=str(tokenizer_source or path),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enable_sleep_mode=self.sleep_supported,
            seed=seed,
            enforce_eager=enforce_eager,
            logprobs_mode="processed_logprobs",
            **llm_kwargs,
        )
        self._engine = self.llm.llm_engine
        # A tokenizer object (the trainer's) renders prompts exactly as the trainer sees them.
        given = tokenizer is not None and not isinstance(tokenizer, (str, Path))
        self.tokenizer = tokenizer if given else self.llm.get_tokenizer()
        # Every end-of-sequence token ends a sample, as in HFPolicy (vLLM alone stops on one EOS).
        self.end_token_ids = sorted(end_token_ids(trainer_model, self.tokenizer))
        config = self._engine.vllm_config
        self.dtype = config.model_config.dtype
        self.device = config.device_config.device
        self.max_model_len: int = config.model_config.max_model_len
        self._workers: int = config.parallel_config.world_size
        self._checkpoint_names = checkpoint_names(path)
        self._lock = threading.RLock()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._inflight: dict[str, _Request] = {}
        self._ids = itertools.count()
        self._driver: threading.Thread | None = None
        self._failure: str | None = None
        self._closed = False
        self._asleep: set[str] = set()
        if trainer_model is not None:
            self.sync_weights(trainer_model)

    # -- prompts and requests --------------------------------------------------------------------

    def render_prompt(self, messages: list[Message], thinking: bool = True) -> str:
        """Chat template + generation prompt (+ an empty think block when not thinking)."""
        return render_chat_prompt(self.tokenizer, messages, thinking)

    def encode_prompt(self, messages: list[Message], thinking: bool = True) -> list[int]:
        return list(
            self.tokenizer(self.render_prompt(messages, thinking), add_special_tokens=False)["input_ids"]
        )

    def _params(self, sampling: SamplingParams) -> Any:
        from vllm.sampling_params import RequestOutputKind

        sampling.validate()
        stops = [sampling.stop] if isinstance(sampling.stop, str) else sampling.stop or []
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=sampling.max_tokens,
            temperature=float(sampling.temperature),
            top_p=float(sampling.top_p),
            seed=sampling.seed,
            stop=[s for s in stops if s] or None,
            stop_token_ids=self.end_token_ids or None,
            logprobs=0,  # the sampled token's logprob only
            skip_special_tokens=False,
            spaces_between_special_tokens=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def _request(self, messages: list[Message], sampling: SamplingParams, thinking: bool) -> _Request:
        """Validate and tokenise one request; what is wrong with it raises ``PolicyError`` here (a prompt
        that does not fit ``max_model_len``: ``ContextOverflowError``, so the runner truncates the episode)."""
        if self._closed:
            raise PolicyError("this VLLMEngine was closed")
        if self._failure:
            raise PolicyError(f"the vLLM engine failed earlier: {self._failure}")
        prompt_ids = self.encode_prompt(messages, thinking)
        if len(prompt_ids) >= self.max_model_len:
            raise ContextOverflowError(
                f"the prompt has {len(prompt_ids)} tokens; max_model_len is {self.max_model_len}"
            )
        return _Request(str(next(self._ids)), prompt_ids, self._params(sampling), concurrent.futures.Future())

    def _submit(self, requests: list[_Request]) -> list[concurrent.futures.Future]:
        """Hand requests to the driver thread."""
        for request in requests:
            request.future.add_done_callback(functools.partial(self._on_done, request.request_id))
            self._inbox.put(request)
        self._ensure_driver()
        return [r.future for r in requests]

    def _on_done(self, request_id: str, future: concurrent.futures.Future) -> None:
        """A caller that gave up (cancelled) gets its request aborted by the driver."""
        if future.cancelled():
            self._inbox.put(request_id)

    # -- generation ------------------------------------------------------------------------------

    def generate(
        self,
        prompts: Sequence[list[Message]],
        sampling: SamplingParams | None = None,
        *,
        thinking: bool = True,
    ) -> list[Completion]:
        """Complete each message list once (blocking); results in input order."""
        sampling = sampling or SamplingParams()
        futures = self._submit([self._request(messages, sampling, thinking) for messages in prompts])
        return [f.result() for f in futures]

    async def agenerate(
        self, messages: list[Message], *, sampling: SamplingParams, thinking: bool = True
    ) -> Completion:
        """Complete one conversation; concurrent calls are batched by vLLM's scheduler."""
        return await asyncio.wrap_future(self._submit([self._request(messages, sampling, thinking)])[0])

    def _ensure_driver(self) -> None:
        with self._lock:
            if self._driver is None or not self._driver.is_alive():
                self._driver = threading.Thread(target=self._drive, name="vllm-engine", daemon=True)
                self._driver.start()

    def _drive(self) -> None:
        """Admit queued requests, step the engine, hand out finished completions; until closed."""
        try:
            while not self._closed:
                busy = self._engine.has_unfinished_requests()
                self._admit(block=not busy)
                if not self._engine.has_unfinished_requests():
                    continue
                with self._lock:
                    self._wake(None)
                    outputs = self._engine.step()
                for out in outputs:
                    request = self._inflight.pop(out.request_id, None) if out.finished else None
                    if request is None:
                        continue
                    try:
                        _settle(request.future, result=_completion(out, request.prompt_ids))
                    except PolicyError as exc:
                        _settle(request.future, error=exc)
        except Exception as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
            log.exception("the vLLM engine loop failed")
            self._fail_all(PolicyError(f"the vLLM engine failed: {self._failure}"))

    def _admit(self, block: bool) -> None:
        """Add queued requests to the engine (waiting for one when idle); apply cancellations."""
        try:
            item = self._inbox.get() if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while item is not None:  # None: the wake-up that close() sends
            with self._lock:
                self._wake(None)
                if isinstance(item, str):  # a cancelled request's id
                    if self._inflight.pop(item, None) is not None:
                        self._engine.abort_request([item])
                elif not item.future.cancelled():
                    try:
                        self._engine.add_request(
                            item.request_id, {"prompt_token_ids": item.prompt_ids}, item.params
                        )
                        self._inflight[item.request_id] = item
                    except Exception as exc:  # a request vLLM rejects fails alone
                        _settle(item.future, error=PolicyError(f"vLLM rejected the request: {exc}"))
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _fail_all(self, error: Exception) -> None:
        for request in list(self._inflight.values()):
            _settle(request.future, error=error)
        self._inflight.clear()
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Request):
                _settle(item.future, error=error)

    # -- weights ---------------------------------------------------------------------------------

    def sync_weights(self, model: Any, bucket_mb: int | None = None) -> None:
        """Copy ``model``'s weights (a ``torch.nn.Module`` or ``(name, tensor)`` pairs) into vLLM in place.

        Names are the Hugging Face checkpoint names (``model.layers.0.self_attn.q_proj.weight``);
        an unknown name fails before anything is loaded. Pass whole layers: a layer receives its
        new weights only once all of its tensors have arrived.
        """
        if self._closed:
            raise PolicyError("this VLLMEngine was closed")
        named = list(model.named_parameters() if hasattr(model, "named_parameters") else model)
        unknown = [
            n for n, _ in named if self._checkpoint_names is not None and n not in self._checkpoint_names
        ]
        if unknown:
            raise CascadeError(
                f"sync_weights: {len(unknown)} name(s) not in the checkpoint vLLM loaded, e.g. {unknown[:3]} "
                f"(expected names like {sorted(self._checkpoint_names or [])[:2]}); pass the unwrapped model"
            )
        bucket_bytes = (bucket_mb or self.bucket_mb) * 2**20
        start = time.perf_counter()
        with self._lock:
            if self._inflight:
                log.warning(
                    "sync_weights with %d request(s) in flight: they finish with the new weights",
                    len(self._inflight),
                )
            self._wake(["weights"])
            weights: Iterable[tuple[str, Any]] = self._buckets(named, bucket_bytes)
            if self._workers > 1:  # worker processes: the RPC is pickled, and a generator cannot be
                weights = list(weights)
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
            )
            self.llm.apply_model(reprocess_shared_weights)
            self.llm.reset_prefix_cache()
        log.info("synced %d tensors into vLLM in %.2f s", len(named), time.perf_counter() - start)

    def _buckets(self, named: list[tuple[str, Any]], bucket_bytes: int) -> Iterator[tuple[str, Any]]:
        """Yield the tensors cast to vLLM's dtype/device, one bucket of ``bucket_bytes`` at a time."""
        bucket: list[tuple[str, Any]] = []
        size = 0
        for name, tensor in named:
            bucket.append((name, tensor))
            size += tensor.numel() * self.dtype.itemsize
            if size >= bucket_bytes:
                yield from self._cast(bucket)
                bucket, size = [], 0
        yield from self._cast(bucket)

    def _cast(self, bucket: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        return [(name, t.detach().to(device=self.device, dtype=self.dtype)) for name, t in bucket]

    # -- memory ----------------------------------------------------------------------------------

    def sleep(self) -> None:
        """Free the GPU for training: weights to CPU, KV cache dropped (no-op without sleep mode)."""
        if not self.sleep_supported:
            log.debug("sleep(): vLLM sleep mode is off or unsupported here; nothing to do")
            return
        with self._lock:
            if self._asleep:
                return
            if self._inflight:
                raise PolicyError(f"cannot sleep with {len(self._inflight)} request(s) in flight")
            self.llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}

    def wake_up(self) -> None:
        """Restore what ``sleep`` freed (no-op when awake or without sleep mode)."""
        with self._lock:
            self._wake(None)

    def _wake(self, tags: list[str] | None) -> None:
        """Wake the given parts (all when None); caller holds the lock."""
        wanted = self._asleep if tags is None else self._asleep & set(tags)
        if wanted:
            self.llm.wake_up(tags=sorted(wanted))
            self._asleep -= wanted

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the driver, fail whatever is pending and shut the engine down."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(None)
        driver = self._driver
        if driver is not None and driver is not threading.current_thread():
            driver.join(timeout=30)
        self._fail_all(PolicyError("this VLLMEngine was closed"))
        with self._lock:
            self._engine.engine_core.shutdown()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


def _settle(future: concurrent.futures.Future, *, result: Any = None, error: Exception | None = None) -> None:
    """Resolve a future unless its caller already gave up on it."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


def _completion(out: Any, prompt_ids: list[int]) -> Completion:
    """A finished vLLM ``RequestOutput`` as a ``Completion`` (sampled-token logprobs, ids, reason)."""
    sample = out.outputs[0]
    token_ids = list(sample.token_ids)
    logprobs = [
        float(step[token].logprob) for step, token in zip(sample.logprobs or [], token_ids, strict=False)
    ]
    if len(logprobs) != len(token_ids):
        raise PolicyError(f"vLLM returned {len(logprobs)} logprobs for {len(token_ids)} tokens")
    return Completion(
        sample.text,
        finish_reason=sample.finish_reason,
        token_ids=token_ids,
        logprobs=logprobs,
        prompt_token_ids=list(prompt_ids),
    )
