"""The two NeMo Gym row kinds that are not repairs: picking the correct fix, writing a reproduction test.

Choosing a fix (``swerl_llm_judge``): the answer names a letter in a ``<solution>`` block.
``strict`` accepts only the first ``<solution>X</solution>`` (the letter may be bracketed, spaces
around it allowed); ``lenient`` reads the last solution block and takes its first letter that
stands alone (no letter right before or after it), e.g. ``<solution>Fix B</solution>`` -> B. A
letter that is not an option gives no answer. These are upstream's rules, so rollouts re-score
the same; here the ``<think>`` part is split off first (upstream reads the whole message).

Reproduction tests (``swerl_gen`` ``repro-gen``): the test is the last ```` ```python ```` block of
the answer. Upstream runs it in the instance's container image before and after the reference
patch (exit code 2, then 0, earns 1); with no container runtime here, an answer holding a test
can only be masked, and one without a test is a plain 0 (upstream's 0 too, without running
anything). Upstream's fallback to a shebang script between dashed lines is not supported.
"""

from __future__ import annotations

import bisect
import re

_OPEN_TAG, _CLOSE_TAG = re.compile("<solution>", re.IGNORECASE), re.compile("</solution>", re.IGNORECASE)
_OPEN_FENCE, _CLOSE_FENCE = re.compile("```python\n"), re.compile("\n```")
_STRICT = re.compile(r"<solution>\s*\[?([A-Za-z])\]?\s*</solution>")


def chosen_letter(answer: str, letters: tuple[str, ...], mode: str) -> str | None:
    """The option letter ``answer`` picks under grading ``mode``, or ``None``."""
    if mode == "strict":
        match = _STRICT.search(answer)
        letter = match.group(1).upper() if match else None
    else:
        blocks = _enclosed(answer, _OPEN_TAG, _CLOSE_TAG)
        letter = _lone_letter(blocks[-1].strip()) if blocks else None
    return letter if letter in letters else None


def _lone_letter(text: str) -> str | None:
    """The first letter of ``text`` with no letter on either side, upper-cased."""
    for i, char in enumerate(text):
        if not char.isalpha():
            continue
        before = text[i - 1] if i else ""
        after = text[i + 1] if i + 1 < len(text) else ""
        if not before.isalpha() and not after.isalpha():
            return char.upper()
    return None


def reproduction_test(answer: str) -> str | None:
    """The test script an answer proposes (its last ```` ```python ```` block), or ``None``."""
    blocks = _enclosed(answer, _OPEN_FENCE, _CLOSE_FENCE)
    return blocks[-1] if blocks else None


def _enclosed(text: str, opening: re.Pattern[str], closing: re.Pattern[str]) -> list[str]:
    """What ``opening(.*?)closing`` (DOTALL) would find in ``text``, in linear time.

    The regex backtracks over every unclosed opening (quadratic on adversarial answers); here
    each block runs from an opening to the first closing after it, scanning on past that closing.
    """
    closings = [m.span() for m in closing.finditer(text)]
    starts = [start for start, _ in closings]
    blocks: list[str] = []
    position = 0
    for match in opening.finditer(text):
        if match.start() < position:
            continue
        k = bisect.bisect_left(starts, match.end())
        if k == len(starts):
            break
        blocks.append(text[match.end() : starts[k]])
        position = closings[k][1]
    return blocks
