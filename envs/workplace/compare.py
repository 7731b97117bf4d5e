"""Whether two workplaces hold the same data, after normalisation, and a short account of how not.

The reward of a workplace task compares the state the agent left with the state its ground-truth
calls leave on a fresh copy (NeMo Gym's rule). Two states are equal when every table is, under
these rules:

1. **Case.** Text compares case-insensitively, except ``status``, ``list_name`` and ``board``,
   whose values are fixed vocabularies the tools check case-sensitively (NeMo Gym makes the same
   exception, for the same reason).
2. **Whitespace.** Leading and trailing whitespace is ignored and inner runs of whitespace count
   as one space: "Thanks  for the update\\n" is the text the user dictated. (NeMo Gym compares
   whitespace exactly.)
3. **Missing values.** An empty text is a missing value: an optional field passed as ``""`` is a
   field not given. (NeMo Gym tells ``""`` from a missing value.)
4. **Dates and times.** In date columns (``sent_datetime``, ``event_start``, ``due_date``,
   ``last_contact_date``, ``follow_up_by``), values that parse as ISO dates or date-times compare
   as the instant they name: "2023-12-01 09:00" equals "2023-12-01 09:00:00", and a bare date is
   its midnight. Other values compare as text. (NeMo Gym compares the text.)
5. **Order of independent writes.** Row order never matters; rows that were in the tables from the
   start are matched by id, so updates and deletes of different rows may come in any order; rows
   created during the episode are matched by their content, ids aside, as a multiset: the ids the
   tools give new rows depend on the order of the creations, which the task does not fix. Making
   the same row twice is still two rows. (NeMo Gym compares the tables row by row, in order, ids
   included, so it scores two creations in the other order as wrong.)

Read-only tables (analytics visits, the directory) cannot differ, and tables that neither side
wrote are the same object, which the comparison skips; so does every row object that neither
side replaced. A comparison therefore costs time in proportion to the rows that were written.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .tables import Row, Snapshot, TableState

CASE_SENSITIVE = frozenset({"status", "list_name", "board"})
DATE_COLUMNS = frozenset({"sent_datetime", "event_start", "due_date", "last_contact_date", "follow_up_by"})
MAX_DIFFERENCES = 5
MAX_VALUE_CHARS = 60


@dataclass(frozen=True)
class Comparison:
    """The verdict: ``equal``, and when not, the first differences (at most ``MAX_DIFFERENCES``)."""

    equal: bool
    differences: tuple[str, ...] = ()
    more: int = 0
    """Differences found beyond those listed."""
    tables: tuple[str, ...] = field(default=())
    """The tables that differ."""

    @property
    def reason(self) -> str:
        if self.equal:
            return "the final state matches the expected one"
        listed = "; ".join(self.differences)
        extra = f"; and {self.more} more" if self.more else ""
        return f"the final state differs from the expected one: {listed}{extra}"


def normalise(column: str, value: Any) -> Any:
    """A value as the comparison sees it (rules 1-4 of the module docstring)."""
    if not isinstance(value, str):
        return value
    text = " ".join(value.split())
    if not text:
        return None
    if column in DATE_COLUMNS:
        try:
            return datetime.fromisoformat(text).replace(tzinfo=None)
        except ValueError:
            pass
    return text if column in CASE_SENSITIVE else text.casefold()


def compare(expected: Snapshot, actual: Snapshot, *, max_differences: int = MAX_DIFFERENCES) -> Comparison:
    """Compare two workplace states under the normalisation rules; differences are listed in table order."""
    found: list[str] = []
    tables: list[str] = []
    for name in dict.fromkeys([*expected, *actual]):
        if name not in expected or name not in actual:
            found.append(f"{name}: the table is missing from one side")
            tables.append(name)
            continue
        differences = _table_differences(expected[name], actual[name])
        if differences:
            found.extend(differences)
            tables.append(name)
    shown = found[:max_differences]
    return Comparison(not found, tuple(shown), len(found) - len(shown), tuple(tables))


def _table_differences(expected: TableState, actual: TableState) -> list[str]:
    if expected.rows is actual.rows and expected.created == actual.created:
        return []
    columns = tuple(dict.fromkeys([*expected.columns, *actual.columns]))
    name = expected.name
    found = []
    for key, row in expected.rows.items():  # the rows of the tables as loaded, matched by id
        other = actual.rows.get(key)
        if other is row or key in expected.created:
            continue
        if other is None or key in actual.created:
            found.append(f"{name}: row {key} was deleted but should remain")
            continue
        for column in columns:
            want, got = row.get(column), other.get(column)
            if want != got and normalise(column, want) != normalise(column, got):
                found.append(f"{name}: row {key}: {column} is {_show(got)}, expected {_show(want)}")
    for key in actual.rows:
        if key not in actual.created and (key not in expected.rows or key in expected.created):
            found.append(f"{name}: row {key} should have been deleted")
    found.extend(_new_row_differences(name, columns, expected, actual))
    return sorted(found)


def _new_row_differences(
    name: str, columns: tuple[str, ...], expected: TableState, actual: TableState
) -> list[str]:
    """Rows created during the episode, compared as multisets of their content (ids aside)."""
    content = [c for c in columns if c != expected.key]
    want, wanted_rows = _new_rows(content, expected)
    got, got_rows = _new_rows(content, actual)
    found = []
    for row, count in (want - got).items():
        found.append(f"{name}: a new row is missing{_times(count)}: {_show_row(content, wanted_rows[row])}")
    for row, count in (got - want).items():
        found.append(f"{name}: an unexpected new row{_times(count)}: {_show_row(content, got_rows[row])}")
    return found


def _new_rows(columns: list[str], table: TableState) -> tuple[Counter, dict[tuple, Row]]:
    """The created rows' normalised contents, counted, and one original row for each."""
    counts: Counter = Counter()
    originals: dict[tuple, Row] = {}
    for key in table.created:
        row = table.rows.get(key)
        if row is not None:
            content = tuple(normalise(c, row.get(c)) for c in columns)
            counts[content] += 1
            originals.setdefault(content, row)
    return counts, originals


def _show_row(columns: list[str], row: Row) -> str:
    return "{" + ", ".join(f"{c}={_show(row.get(c))}" for c in columns if row.get(c) is not None) + "}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 4] + "...'"


def _times(count: int) -> str:
    return f" ({count} times)" if count > 1 else ""
