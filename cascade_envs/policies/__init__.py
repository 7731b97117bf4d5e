"""Local policies: a Hugging Face transformers policy and the embedded default model.

Imported lazily, so ``import cascade_envs.policies`` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core import CascadeError

if TYPE_CHECKING:
    from ..policy import Policy

_LAZY = {
    "OpenAIChatPolicy": ("cascade_envs.policies.openai", "OpenAIChatPolicy"),
    "HFPolicy": ("cascade_envs.policies.hf", "HFPolicy"),
    "embedded_model_path": ("cascade_envs.policies.embedded", "embedded_model_path"),
}

__all__ = ["HFPolicy", "OpenAIChatPolicy", "embedded_model_path", "make_policy"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_policy(spec: str, **kwargs: Any) -> Policy:
    """Build a policy from ``http(s)://host/v1``, ``hf:PATH`` or ``embedded``."""
    if spec.startswith(("http://", "https://")):
        from .openai import OpenAIChatPolicy

        return OpenAIChatPolicy(spec, **kwargs)
    if spec == "embedded" or spec.startswith("hf:"):
        from .hf import HFPolicy

        return HFPolicy.embedded(**kwargs) if spec == "embedded" else HFPolicy.from_spec(spec, **kwargs)
    raise CascadeError(f"unknown policy {spec!r}: use http(s)://HOST/v1, hf:PATH or embedded")
