"""What the GenRM judge is shown for one comparison, and how its verdict is read back.

Two prompt formats, both carrying the conversation (its last turn the user's request) and the two
final answers:

- ``"helpsteer3"`` (default): one user message laid out as in the HelpSteer3 GenRM recipe (Wang et
  al., "HelpSteer3-Preference", 2025, and the GenRM prompts of NVIDIA's NeMo-RL experiments):
  scoring guidelines, ``#### Conversation Context ####``, the two responses, then the output format.
  Any chat model can judge with it. The wording here is ours; a GenRM trained on its own prompt
  should be given that prompt through ``prompt_template`` (fields ``{conversation}``,
  ``{response_1}``, ``{response_2}``, and optionally ``{reminder}``; literal braces doubled).
  Each response is fenced inside its field by lines carrying a tag drawn at random for the
  request (``cascade_envs.judges.quoting``), so an answer cannot close its section; the reminder
  that fenced text is material, never instructions, stands where the template puts ``{reminder}``
  (the default template: after the responses, before the output format), else at its end.
- ``"roles"``: the conversation's messages followed by one ``response_1`` and one ``response_2``
  message, for a GenRM whose chat template lays them out itself (NVIDIA's
  Qwen3-Nemotron-235B-A22B-GenRM, the Nemotron 3 Nano RLHF judge, served as in NeMo Gym's
  ``genrm_model``). Each response is its own message, as the GenRM was trained: the messages are
  the boundary and nothing is added to them (a chat template that reads special-token text inside
  a message as tokens is the server's to refuse).

Verdicts are read in either of the two layouts those judges write, whatever the prompt format:
the HelpSteer3 sections ``[The Begin of Individual Scores] \\boxed{x, y} [The End of Individual
Scores]`` and ``[The Begin of Ranking Score] \\boxed{z} [The End of Ranking Score]``, or a JSON object
``{"score_1": x, "score_2": y, "ranking": z}`` (NeMo Gym ``genrm_compare``; other keys, nested
objects and braces inside strings are fine, up to ``MAX_JSON_CHARS`` characters). The judge's own
reasoning (``…</think>``) is dropped first, and so is what the reply echoes of the two responses
(``Quote.scrub``); the last section (or JSON object) wins, since a judge may quote the responses
before it concludes, and a verdict copied word for word from a response is refused. Scores must be
in 1-5 and the ranking in 1-6, all three present (upstream fills a missing value with a neutral
default; here the reply is unparseable and is asked again).
"""

from __future__ import annotations

import functools
import json
import re
import string
from collections import deque
from collections.abc import Iterable
from typing import Any, TypeVar

from cascade_envs.core import Message
from cascade_envs.judges.quoting import Quote
from cascade_envs.reasoning import split_reasoning

from .aggregate import Verdict

T = TypeVar("T")
PROMPT_FORMATS = ("helpsteer3", "roles")
EMPTY_RESPONSE = "None"
"""What the judge is shown in place of an answer it must not see (empty, too long, not text), as
NeMo Gym shows an empty output: the other answer of the pair is still scored against it."""
TEMPLATE_FIELDS = frozenset({"conversation", "response_1", "response_2"})
OPTIONAL_FIELDS = frozenset({"reminder"})
RESPONSE_TITLES = ("RESPONSE 1", "RESPONSE 2")
ROLE_LABELS = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool"}

DEFAULT_TEMPLATE = """\
You are an expert judge of AI assistants' responses. Below are a conversation, whose last turn is \
the user's request, and two candidate responses to that request. Score the helpfulness of each \
response on the [Helpfulness Scale], then compare the two on the [Ranking Scale]. Reason step by \
step before you score, and be strict.

[Helpfulness Scale]
Take into account: whether the response is correct and complete; whether it is clear and \
coherent; whether it does what the user asked, following every instruction; whether it stays on \
the user's topic; and whether its amount of detail fits the request, neither padded nor thin, \
and free of invented facts.
5 - Extremely helpful: does exactly what the user wanted, accurately and with nothing \
superfluous; when a request cannot or should not be fulfilled, it says why and gives useful context.
4 - Mostly helpful: useful and largely what the user wanted, with some room to improve.
3 - Partially helpful: useful in part, but misses part of the user's goal.
2 - Borderline unhelpful: mostly misses what the user wanted; only a little of it is usable.
1 - Not helpful: misses the point of the request entirely.

[Ranking Scale]
Always separate the two responses, even when their helpfulness scores are equal:
1 - Response 1 is much better than Response 2
2 - Response 1 is better than Response 2
3 - Response 1 is slightly better than Response 2
4 - Response 2 is slightly better than Response 1
5 - Response 2 is better than Response 1
6 - Response 2 is much better than Response 1

#### Conversation Context ####
{conversation}

#### Responses to be Scored ####
[The Begin of Response 1]
{response_1}
[The End of Response 1]

[The Begin of Response 2]
{response_2}
[The End of Response 2]

{reminder}

#### Output Format Requirements ####
First analyse each response, response i between [The Begin of Analysis on Response i] and \
[The End of Analysis on Response i]. Then give the two helpfulness scores in order, separated by a \
comma, and the ranking, exactly in this layout:
[The Begin of Individual Scores]
\\boxed{{x, y}}
[The End of Individual Scores]
[The Begin of Ranking Score]
\\boxed{{z}}
[The End of Ranking Score]
"""

_SCORES_SECTION = re.compile(
    r"\[The Begin of Individual Scores\](.*?)(?:\[The End of Individual Scores\]|\[The Begin of|\Z)",
    re.IGNORECASE | re.DOTALL,
)
_RANKING_SECTION = re.compile(
    r"\[The Begin of Ranking Score\](.*?)(?:\[The End of Ranking Score\]|\[The Begin of|\Z)",
    re.IGNORECASE | re.DOTALL,
)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_OBJECT_START = re.compile(r'\{\s*"')
_VERDICT_KEYS = ("score_1", "score_2", "ranking")
_JSON = json.JSONDecoder()
MAX_JSON_CHARS = 10_000
"""The longest JSON verdict object read (it bounds the work a hostile reply can cause)."""


def check_template(template: str) -> str:
    """``template`` if it formats with exactly the fields ``{conversation}``, ``{response_1}``,
    ``{response_2}`` (and optionally ``{reminder}``); ``ValueError`` saying what is wrong otherwise."""
    hint = "double literal braces, e.g. \\boxed{{x, y}}"
    try:
        fields = _fields(template)
    except ValueError as exc:
        raise ValueError(f"prompt_template does not parse ({exc}); {hint}") from exc
    if not TEMPLATE_FIELDS <= fields <= TEMPLATE_FIELDS | OPTIONAL_FIELDS:
        raise ValueError(
            f"prompt_template must use exactly the fields {sorted(TEMPLATE_FIELDS)} "
            f"(and optionally {sorted(OPTIONAL_FIELDS)}), got {sorted(fields)}; {hint}"
        )
    try:
        template.format(conversation="", response_1="", response_2="", reminder="")
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise ValueError(f"prompt_template does not format ({type(exc).__name__}: {exc})") from exc
    return template


@functools.lru_cache(maxsize=64)
def _fields(template: str) -> frozenset[str]:
    """The replacement fields of ``template``; ``ValueError`` when it does not parse."""
    return frozenset(name for _, name, _, _ in string.Formatter().parse(template) if name is not None)


def render_conversation(messages: list[Message]) -> str:
    """The conversation as text, one ``Role: content`` block per message."""
    return "\n\n".join(
        f"{ROLE_LABELS.get(m['role'], str(m['role']).title())}: {m.get('content') or ''}" for m in messages
    )


def comparison_messages(
    conversation: list[Message],
    response_1: str,
    response_2: str,
    *,
    prompt_format: str = "helpsteer3",
    template: str = DEFAULT_TEMPLATE,
    untrusted: tuple[str, ...] | None = None,
) -> tuple[list[Message], Quote]:
    """The chat messages that ask the judge to compare ``response_1`` with ``response_2``, and their
    quote. ``untrusted``: the texts the policy wrote (default: both responses; a stand-in such as
    ``EMPTY_RESPONSE`` is left out)."""
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown prompt_format {prompt_format!r}; choose from {list(PROMPT_FORMATS)}")
    rendered = render_conversation(conversation)
    untrusted = (response_1, response_2) if untrusted is None else untrusted
    quote = Quote.new(untrusted, trusted=(rendered, response_1, response_2))
    if prompt_format == "roles":
        return [
            *conversation,
            {"role": "response_1", "content": response_1},
            {"role": "response_2", "content": response_2},
        ], quote
    first, second = (
        quote.fence(title, text)
        for title, text in zip(RESPONSE_TITLES, (response_1, response_2), strict=True)
    )
    fields = {"conversation": rendered, "response_1": first, "response_2": second}
    if "reminder" in _fields(template):
        text = template.format(reminder=quote.reminder(), **fields)
    else:
        text = template.format(**fields) + "\n\n" + quote.reminder()
    return [{"role": "user", "content": text}], quote


def parse_verdict(reply: str, quote: Quote | None = None) -> Verdict:
    """The verdict in a judge's reply; ``ValueError`` saying what is missing, out of range or (with
    ``quote``, whose echoes are cut from the reply first) copied from a response."""
    split = split_reasoning(reply)
    if split.unterminated:
        raise ValueError("the reply ends inside the judge's reasoning, before any verdict")
    text = quote.scrub(split.answer) if quote is not None else split.answer
    scores = _last(_SCORES_SECTION.finditer(text))
    found = _last_verdict_object(text, scores.start() if scores is not None else 0)
    if found is not None:
        json_object, span = found
        verdict = _json_verdict(json_object)
    elif scores is not None:
        verdict, span = _sectioned_verdict(scores.group(1), text[scores.start() :])
    else:
        raise ValueError(
            "no verdict: expected the [The Begin of Individual Scores] \\boxed{x, y} and "
            "[The Begin of Ranking Score] \\boxed{z} sections, or a JSON object with "
            "score_1, score_2 and ranking"
        )
    if quote is not None and quote.copied(span):
        raise ValueError("the verdict is a copy of text in a response")
    return verdict


def _last(items: Iterable[T]) -> T | None:
    last = deque(items, maxlen=1)
    return last[0] if last else None


def _sectioned_verdict(scores_section: str, rest: str) -> tuple[Verdict, str]:
    """The verdict of the sections at the start of ``rest``, and their text."""
    scores = _boxed_numbers(scores_section, 2, "individual scores")
    ranking = _last(_RANKING_SECTION.finditer(rest))
    if ranking is None:
        raise ValueError(
            "the reply has individual scores but no [The Begin of Ranking Score] section after them"
        )
    (value,) = _boxed_numbers(ranking.group(1), 1, "ranking score")
    return Verdict(scores[0], scores[1], value), rest[: ranking.end()]


def _boxed_numbers(section: str, count: int, what: str) -> list[float]:
    boxes = _BOXED.findall(section)
    if not boxes:
        raise ValueError(f"the {what} section has no \\boxed{{}} value")
    parts = [part.strip() for part in boxes[-1].split(",")]
    if len(parts) != count or not all(_NUMBER.fullmatch(part) for part in parts):
        raise ValueError(f"the {what} box holds {boxes[-1].strip()[:40]!r}, not {count} number(s)")
    return [float(part) for part in parts]


def _last_verdict_object(text: str, after: int) -> tuple[dict[str, Any], str] | None:
    """The JSON object holding the three verdict keys that starts last in ``text`` after ``after``,
    and its text."""
    end = max(text.rfind('"ranking"'), 0)  # such an object starts before the last "ranking" key
    while (start := text.rfind("{", after, end)) >= 0:
        if _OBJECT_START.match(text, start):
            try:
                candidate, length = _JSON.raw_decode(text[start : start + MAX_JSON_CHARS])
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
                candidate = None
            if isinstance(candidate, dict) and all(key in candidate for key in _VERDICT_KEYS):
                return candidate, text[start : start + length]
        end = start
    return None


def _json_verdict(found: dict[str, Any]) -> Verdict:
    return Verdict(*(_as_number(found[key], key) for key in _VERDICT_KEYS))


def _as_number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{key} is {value!r:.40}, not a number")
    if isinstance(value, str) and not _NUMBER.fullmatch(value.strip()):
        raise ValueError(f"{key} is {value!r:.40}, not a number")
    return float(value)
