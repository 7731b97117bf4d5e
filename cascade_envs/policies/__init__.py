"""Local policies: a Hugging Face transformers policy and the embedded default model.

Imported lazily, so ``import cascade_envs.policies`` does not import torch.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "HFPolicy": ("cascade_envs.policies.hf", "HFPolicy"),
    "embedded_model_path": ("cascade_envs.policies.embedded", "embedded_model_path"),
}

__all__ = ["HFPolicy", "embedded_model_path"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
