"""Text helpers of the IFBench checkers: punctuation handling, stop words, edge-stripped words.

Sentence splitting and word counting come from the shared ``text`` module; what lives here is
specific to the IFBench family. "Punctuation" means ASCII punctuation (``string.punctuation``),
the set the IFBench definitions strip and count.
"""

from __future__ import annotations

import functools
import importlib
import re
import string
from types import ModuleType

from .registry import instruction
from .text import ResourceUnavailable, count_words, split_sentences

__all__ = [
    "PUNCTUATION",
    "STOPWORDS",
    "count_words",
    "edge_stripped_words",
    "ifbench",
    "remove_punctuation",
    "require",
    "sentences",
    "strip_punctuation",
]

ifbench = functools.partial(instruction, family="ifbench")
"""``@ifbench("id")`` registers a checker of the IFBench family."""

PUNCTUATION = string.punctuation
_NO_PUNCTUATION = str.maketrans("", "", PUNCTUATION)
_EDGES = PUNCTUATION + " "
_NON_WORD_EDGES = re.compile(r"^[\W_]+|[\W_]+$")

sentences = split_sentences
"""The sentence splitter of every sentence-based IFBench checker (IFEval's rule-based one)."""


@functools.cache
def require(module: str, needed_by: str) -> ModuleType:
    """Import ``module`` for the checker ``needed_by``; a missing package is a ``ResourceUnavailable``
    (the env masks the reward) rather than an ``ImportError``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ResourceUnavailable(
            f"{needed_by} needs {module.split('.')[0]}: pip install 'cascade-envs[verifiers]'"
        ) from exc


def remove_punctuation(text: str) -> str:
    """``text`` without any ASCII punctuation character."""
    return text.translate(_NO_PUNCTUATION)


def strip_punctuation(text: str) -> str:
    """``text`` without leading/trailing ASCII punctuation and spaces."""
    return text.strip(_EDGES)


def edge_stripped_words(text: str) -> list[str]:
    """Whitespace-separated words with non-word characters stripped from both ends; pure
    punctuation/symbol tokens (``-``, ``—``, ``**``, emoji) are not words and are dropped."""
    stripped = (_NON_WORD_EDGES.sub("", token) for token in text.split())
    return [word for word in stripped if word]


# NLTK's English stop-word list, restricted to entries that a ``\w+`` token can equal (the
# apostrophe forms such as "don't" can never match a ``\w+`` token).
STOPWORDS = frozenset(
    """
    a about above after again against ain all am an and any are aren as at be because been before
    being below between both but by can couldn d did didn do does doesn doing don down during each
    few for from further had hadn has hasn have haven having he her here hers herself him himself
    his how i if in into is isn it its itself just ll m ma me mightn more most mustn my myself
    needn no nor not now o of off on once only or other our ours ourselves out over own re s same
    shan she should shouldn so some such t than that the their theirs them themselves then there
    these they this those through to too under until up ve very was wasn we were weren what when
    where which while who whom why will with won wouldn y you your yours yourself yourselves
    """.split()  # noqa: SIM905
)
