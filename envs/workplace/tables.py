"""The state of a simulated workplace: its tables in memory, a template per folder, a copy per episode.

A tables folder holds the WorkBench CSVs as NeMo Gym ships them (a header row, one row a line,
an empty cell is a missing value, every value is text), one per data set (``TABLES``):

- ``email``: ``emails.csv``, keyed by ``email_id``;
- ``calendar``: ``calendar_events.csv``, keyed by ``event_id``;
- ``analytics``: ``analytics_data.csv``, website visits, read only (no key);
- ``project_management``: ``project_tasks.csv``, keyed by ``task_id``;
- ``customer_relationship_manager``: ``customer_relationship_manager_data.csv``, keyed by
  ``customer_id``;

plus the company directory, read from the first of: ``email_addresses.csv`` (WorkBench's raw
file: one address a line, an ``email_address`` header optional); ``company_directory.json`` when
it holds addresses (a list of strings, a list of ``{"email_address": ...}`` objects, or
``{"email_addresses": [...]}``; WorkBench's file of that name holds only tool definitions and is
skipped); otherwise the team the tables assign work to (``assigned_to_email`` of the project tasks
and the CRM customers), sorted. A sixth table, ``plots``, starts empty and records the plots that
``analytics_create_plot`` makes.

Representation: plain tables of rows, each row a dict that is never changed in place, indexed by
key in table order. ``Workplace.load(folder)`` reads a template once (~10 ms for WorkBench's
2,300 rows); ``template.fresh()`` gives an episode its own workplace that shares the template's
rows and copies a table's index only when the episode first writes to it (copy-on-write), so a
fresh copy costs ~2-4 µs whatever the table sizes (an in-memory SQLite copy of the same tables
by the backup API costs ~60-110 µs, and reading it back to compare two states ~8 ms), and
``snapshot()`` freezes the current state in O(1) (later writes copy again). Two episodes'
workplaces share nothing but rows that neither may change.

Limits: an episode may add at most ``MAX_NEW_ROWS`` rows to a table; ids of new rows follow NeMo
Gym: the largest numeric id plus one, zero-padded to 8 digits except for emails (NeMo Gym's
``send_email`` does not pad).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cascade_envs.core import CascadeError
from cascade_envs.tools import ToolError

Row = Mapping[str, Any]
MAX_NEW_ROWS = 1000
"""Rows an episode may add to one table (each tool call adds at most one)."""
ID_WIDTH = 8


class TablesError(CascadeError):
    """A tables folder is missing a file or a column, or holds duplicate ids."""


@dataclass(frozen=True)
class TableSpec:
    """Where a data set's table comes from and which columns its tools need."""

    file: str
    key: str | None
    columns: tuple[str, ...]
    pad_ids: bool = True


TABLES: dict[str, TableSpec] = {
    "email": TableSpec(
        "emails.csv",
        "email_id",
        ("email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body"),
        pad_ids=False,
    ),
    "calendar": TableSpec(
        "calendar_events.csv",
        "event_id",
        ("event_id", "event_name", "participant_email", "event_start", "duration"),
    ),
    "analytics": TableSpec(
        "analytics_data.csv",
        None,
        (
            "date_of_visit",
            "visitor_id",
            "page_views",
            "session_duration_seconds",
            "traffic_source",
            "user_engaged",
        ),
    ),
    "project_management": TableSpec(
        "project_tasks.csv",
        "task_id",
        ("task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board"),
    ),
    "customer_relationship_manager": TableSpec(
        "customer_relationship_manager_data.csv",
        "customer_id",
        (
            "customer_id",
            "assigned_to_email",
            "customer_name",
            "customer_email",
            "customer_phone",
            "last_contact_date",
            "product_interest",
            "status",
            "follow_up_by",
            "notes",
        ),
    ),
}
PLOTS = "plots"
DIRECTORY_CSV = "email_addresses.csv"
DIRECTORY_JSON = "company_directory.json"


class Table:
    """One table: rows in table order, indexed by key (or by position for a keyless table).

    Copy-on-write: a table made by ``fork`` shares its parent's index until its first write.
    ``created`` holds the keys of rows added since the template was loaded.
    """

    __slots__ = ("_owned", "_rows", "_serial", "columns", "created", "key", "limit", "name", "pad_ids")

    def __init__(
        self,
        name: str,
        columns: tuple[str, ...],
        key: str | None,
        rows: dict[str, Row],
        *,
        pad_ids: bool = True,
        limit: int | None = None,
    ):
        self.name, self.columns, self.key, self.pad_ids = name, columns, key, pad_ids
        self._rows = rows
        self._owned = True
        self._serial = len(rows)
        self.created: frozenset[str] = frozenset()
        self.limit = len(rows) + MAX_NEW_ROWS if limit is None else limit

    def fork(self) -> Table:
        """A copy that shares this table's rows until one of the two writes."""
        twin = Table.__new__(Table)
        twin.name, twin.columns, twin.key, twin.pad_ids = self.name, self.columns, self.key, self.pad_ids
        twin._rows, twin._serial, twin.created, twin.limit = (
            self._rows,
            self._serial,
            self.created,
            self.limit,
        )
        twin._owned = self._owned = False
        return twin

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows.values())

    def get(self, key: str) -> Row | None:
        return self._rows.get(key) if isinstance(key, str) else None

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def next_id(self) -> str:
        """NeMo Gym's id for a new row: the largest numeric id plus one (zero-padded if ``pad_ids``)."""
        number = max((int(k) for k in self._rows if k.isdigit()), default=0) + 1
        return str(number).zfill(ID_WIDTH) if self.pad_ids else str(number)

    def insert(self, values: Mapping[str, Any]) -> str:
        """Append a row (missing columns are missing values); return its key."""
        if len(self._rows) >= self.limit:
            raise ToolError(
                f"the {self.name} table is full ({len(self._rows)} rows); delete rows before adding more"
            )
        row = {column: values.get(column) for column in self.columns}
        key: Any = str(self._serial) if self.key is None else row[self.key]
        if not isinstance(key, str) or key in self._rows:
            raise ToolError(f"the {self.name} table already has a row with id {key!r}")
        self._serial += self.key is None
        self._own()[key] = row
        self.created = self.created | {key}
        return key

    def update(self, key: str, column: str, value: Any) -> None:
        """Set one column of an existing row (a new row object: rows are never changed in place)."""
        if column not in self.columns or column == self.key:
            raise ToolError(f"the {self.name} table has no updatable column {column!r}")
        rows = self._own()
        rows[key] = {**rows[key], column: value}

    def delete(self, key: str) -> None:
        del self._own()[key]
        self.created = self.created - {key}

    def state(self) -> TableState:
        """The table as it is now, frozen: later writes to the table copy its index first."""
        self._owned = False
        return TableState(self.name, self.columns, self.key, self._rows, self.created)

    def _own(self) -> dict[str, Row]:
        if not self._owned:
            self._rows = dict(self._rows)
            self._owned = True
        return self._rows


@dataclass(frozen=True)
class TableState:
    """A frozen view of one table (``Table.state``): what the comparison of two workplaces reads."""

    name: str
    columns: tuple[str, ...]
    key: str | None
    rows: Mapping[str, Row]
    created: frozenset[str]


Snapshot = Mapping[str, TableState]
"""The state of a whole workplace: data set name -> its table's state."""


class Workplace:
    """The five data sets, the plots made so far, the company directory and the clock.

    ``Workplace.load(folder)`` is a template; ``fresh()`` the workplace of one episode. Tool
    functions read and write it (``db["email"]``, ``db.directory``, ``db.now``).
    """

    __slots__ = ("directory", "folder", "now", "tables")

    def __init__(self, tables: dict[str, Table], directory: tuple[str, ...], now: datetime, folder: Path):
        self.tables, self.directory, self.now, self.folder = tables, directory, now, folder

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> Workplace:
        """Read a tables folder (see the module docstring); ``TablesError`` names what is wrong."""
        root = Path(folder)
        if not root.is_dir():
            raise TablesError(f"tables folder not found: {root}")
        tables = {name: _read_table(root, name, spec) for name, spec in TABLES.items()}
        tables[PLOTS] = Table(PLOTS, ("file_path",), None, {})
        directory = _read_directory(root, tables)
        now = max((_timestamp(row["sent_datetime"]) for row in tables["email"]), default=datetime(2000, 1, 1))
        return cls(tables, directory, now, root)

    def fresh(self, now: datetime | None = None) -> Workplace:
        """An episode's own workplace: this one's state, copied on write; ``now`` sets its clock."""
        tables = {name: table.fork() for name, table in self.tables.items()}
        return Workplace(tables, self.directory, self.now if now is None else now, self.folder)

    def snapshot(self) -> Snapshot:
        """The current state of every table, frozen (O(1): writes after it copy first)."""
        return {name: table.state() for name, table in self.tables.items()}

    def __getitem__(self, name: str) -> Table:
        return self.tables[name]

    @property
    def timestamp(self) -> str:
        """The clock as the tables write it: ``YYYY-MM-DD HH:MM:SS``."""
        return self.now.strftime("%Y-%m-%d %H:%M:%S")


def _read_table(root: Path, name: str, spec: TableSpec) -> Table:
    path = root / spec.file
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = tuple(next(reader, ()))
            missing = [c for c in spec.columns if c not in header]
            if missing:
                raise TablesError(f"{path}: missing column(s) {missing}; found {list(header)}")
            rows: dict[str, Row] = {}
            for number, cells in enumerate(reader, start=2):
                if len(cells) != len(header):
                    raise TablesError(f"{path}:{number}: {len(cells)} cells for {len(header)} columns")
                row = {column: _cell(column, cell) for column, cell in zip(header, cells, strict=True)}
                key = str(len(rows)) if spec.key is None else row[spec.key]
                if not isinstance(key, str) or key in rows:
                    raise TablesError(f"{path}:{number}: missing or duplicate {spec.key} {key!r}")
                rows[key] = row
    except FileNotFoundError:
        raise TablesError(f"tables folder {root} has no {spec.file}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise TablesError(f"{path}: not a UTF-8 CSV file ({exc})") from None
    return Table(name, header, spec.key, rows, pad_ids=spec.pad_ids)


def _cell(column: str, text: str) -> Any:
    """A CSV cell as NeMo Gym reads it: text, ``None`` when empty, a bool for ``user_engaged``."""
    if column == "user_engaged":
        return text == "True"
    return text if text != "" else None


def _read_directory(root: Path, tables: dict[str, Table]) -> tuple[str, ...]:
    listed = root / DIRECTORY_CSV
    if listed.is_file():
        with listed.open(newline="", encoding="utf-8") as fh:
            lines = [row[0].strip() for row in csv.reader(fh) if row and row[0].strip()]
        return tuple(line for line in lines if line != "email_address")
    described = root / DIRECTORY_JSON
    if described.is_file():
        addresses = _directory_json(json.loads(described.read_text(encoding="utf-8")))
        if addresses is not None:
            return addresses
    team = {
        row["assigned_to_email"]
        for name in ("project_management", "customer_relationship_manager")
        for row in tables[name]
        if row["assigned_to_email"]
    }
    return tuple(sorted(team))


def _directory_json(data: Any) -> tuple[str, ...] | None:
    """The addresses a ``company_directory.json`` holds, or ``None`` when it holds none (tool specs)."""
    if isinstance(data, dict):
        data = data.get("email_addresses")
    if not isinstance(data, list):
        return None
    addresses = [item.get("email_address") if isinstance(item, dict) else item for item in data]
    listed = tuple(a for a in addresses if isinstance(a, str) and a)
    if len(listed) != len(addresses):
        raise TablesError(f"{DIRECTORY_JSON}: every entry must be an address or {{'email_address': ...}}")
    return listed


def _timestamp(text: str | None) -> datetime:
    try:
        return datetime.fromisoformat(text or "")
    except ValueError:
        return datetime(2000, 1, 1)
