"""In-process vLLM, as the rollout engine (``vllm_engine``) and the MOPD teacher (``vllm_teacher``) run it:
the environment it needs, the checkpoint folder it loads, and the weights' post-sync processing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..core import CascadeError


def in_process_vllm_environment() -> None:
    """Set before an in-process ``vllm.LLM`` is built: its engine core and worker stay in this process."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


def model_folder(model: Any) -> Path:
    """The local checkpoint folder of a path or a transformers model."""
    source = model if isinstance(model, (str, Path)) else getattr(model, "name_or_path", None)
    if not source or not Path(source).is_dir():
        what = repr(str(source)) if source else f"a {type(model).__name__} without name_or_path"
        raise CascadeError(f"the vLLM engine needs a local checkpoint folder, got {what}")
    return Path(source)


def checkpoint_names(folder: Path) -> set[str] | None:
    """Tensor names in the folder's safetensors checkpoint (None when it has none)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text())["weight_map"])
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    names: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            names.update(handle.keys())
    return names


def reprocess_shared_weights(model: Any) -> int:
    """Redo the post-load processing of layers that share one weight (tied embeddings).

    The in-place reload processes a layer when its own weights arrive; a tied ``lm_head`` gets none
    (the checkpoint only has the embedding), so a backend that derives kernel data from the weight
    (the CPU backend prepacks the lm_head for its GEMM) would keep computing logits with the old
    values. Reprocessing is idempotent, and a no-op for unquantized layers on GPU.
    """
    groups: dict[int, list[Any]] = {}
    for module in model.modules():
        weight = module._parameters.get("weight")
        if weight is not None and hasattr(module, "quant_method"):
            groups.setdefault(id(weight), []).append(module)
    shared = [m for group in groups.values() if len(group) > 1 for m in group]
    for module in shared:
        module.quant_method.process_weights_after_loading(module)
    return len(shared)
