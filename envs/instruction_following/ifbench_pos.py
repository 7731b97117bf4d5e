"""Part-of-speech test for ``words:start_verb``, offline.

IFBench tags the first token with NLTK's averaged-perceptron tagger, whose model is a separate
download. We use the lexicon + contextual-rule tagger that TextBlob ships inside its wheel (Brill
rules over a 100k-word English lexicon, Penn Treebank tags), so nothing is fetched at run time.
"""

from __future__ import annotations

from .ifbench_text import require


def first_word_is_verb(text: str) -> bool:
    """Whether the first token of ``text`` is tagged as a verb (``VB``, ``VBD``, ``VBG``, ...).

    The tagger reads a capitalised word it does not know as a proper noun, but a response's first
    word is capitalised by convention; so the text is tagged as written and with its first letter
    lowered, and either reading of the first token as a verb counts.
    """
    tag = require("textblob.en", "words:start_verb").tag
    for variant in (text, text[:1].lower() + text[1:]):
        tagged = tag(variant)
        if tagged and tagged[0][1].startswith("VB"):
            return True
    return False
