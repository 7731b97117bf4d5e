"""Which extra of cascade-envs provides an optional module, for one-line install hints."""

from __future__ import annotations

from .core import CascadeError

EXTRA_OF_MODULE = {
    "torch": "train",
    "transformers": "train",
    "safetensors": "train",
    "gguf": "train",
    "accelerate": "train",
    "tensorboard": "train",
    "matplotlib": "train",
    "vllm": "vllm",
    "ray": "ray",
    "pyarrow": "parquet",
    "jsonschema": "verifiers",
    "math_verify": "verifiers",
    "langdetect": "verifiers",
    "nltk": "verifiers",
    "syllapy": "verifiers",
    "emoji": "verifiers",
    "textblob": "verifiers",
    "xmltodict": "verifiers",
    "verl": "verl",
    "omegaconf": "verl",
    "docker": "swe",
    "trl": "trl",
    "datasets": "trl",
    "openhands": "swe",
    "nemo_gym": "nemo-gym",
}


def extra_for_module(module: str) -> str | None:
    return EXTRA_OF_MODULE.get(module.split(".")[0])


def require(module: str, purpose: str) -> None:
    """Raise a one-line error naming the extra to install when ``module`` is missing."""
    import importlib.util

    if importlib.util.find_spec(module.split(".")[0]) is None:
        extra = extra_for_module(module)
        hint = f": pip install 'cascade-envs[{extra}]'" if extra else ""
        raise CascadeError(f"{purpose} needs {module!r}, which is not installed{hint}")
