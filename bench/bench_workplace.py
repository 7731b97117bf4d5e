"""Workplace env cost: replayed episodes, a fresh copy of the tables, one state comparison.

Ours: ``cascade/Workplace-v0`` on its bundled tables. A scripted policy replays every bundled
task's ``solution`` (one ``<tool_call>`` a turn, then a final reply that states the row's
``expected_answer`` when it asks a question) through the ``RolloutRunner``, and through a bare
``astart``/``aadvance``/``ascore_episodes`` loop that splits an episode's time into start (the
row, the prompt and the episode's copy of the tables), turns (parse, validate, run, render each
call) and scoring (the ground truth on a fresh copy, the comparison, the answer check).

Reference, measured in the same run: the same work written plainly (the tables as a dict of
column lists, as a DataFrame holds them; a full copy per episode; the same calls parsed from the
same text, run by minimal functions that return the same results; scoring by replaying the ground
truth on another full copy, comparing every cell, case-folded, in order, and looking for each
answer item, case-folded, in the reply), and an in-memory SQLite variant of the copy
(``Connection.backup``) and of the comparison (``EXCEPT`` both ways over every table). Ratios are
ours / reference: below 1 means ours is faster (the reference has no runner, so the runner's row
is set against the reference loop).

    python bench/bench_workplace.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cascade_envs import Completion
from cascade_envs.data import prompt_messages
from cascade_envs.envs.workplace.answer import ExpectedAnswer
from cascade_envs.envs.workplace.compare import compare
from cascade_envs.envs.workplace.env import WorkplaceEnv, bundled_tables
from cascade_envs.envs.workplace.tables import TABLES, Workplace
from cascade_envs.envs.workplace.task import task_clock
from cascade_envs.rollout import RolloutRunner

ENV_ID = "cascade/Workplace-v0"
DONE = "Done: the changes are made."
Columns = dict[str, list[Any]]
Calls = list[tuple[str, dict[str, Any]]]


def call_text(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def answer_items(task: dict[str, Any]) -> list[str]:
    """The row's ``expected_answer`` items (the first alternative of each); [] when it asks nothing."""
    value = task.get("expected_answer")
    return [
        item if isinstance(item, str) else item[0]
        for item in ([value] if isinstance(value, str) else value or [])
    ]


def script(task: dict[str, Any]) -> list[str]:
    """The solution's calls, one a turn, then the final reply (stating the answer, for a question)."""
    items = answer_items(task)
    final = f"{DONE} The answer: {'; '.join(items)}." if items else DONE
    return [call_text(c["name"], json.loads(c["arguments"])) for c in task["solution"]] + [final]


class ScriptedPolicy:
    """Each request's solution, one call a turn, then the answer."""

    def __init__(self, tasks: list[dict[str, Any]]):
        self.scripts = {t["responses_create_params"]["input"][1]["content"]: script(t) for t in tasks}

    async def agenerate(self, messages, *, sampling, thinking=True) -> Completion:
        steps = self.scripts[next(m["content"] for m in messages if m["role"] == "user")]
        return Completion(steps[sum(m["role"] == "assistant" for m in messages)], finish_reason="stop")

    async def aclose(self) -> None:
        pass


# ----- ours ---------------------------------------------------------------------------------------


def ours_runner(env: WorkplaceEnv, tasks: list[dict[str, Any]], rounds: int) -> float:
    """Seconds to play every task ``rounds`` times through the RolloutRunner."""

    async def run() -> float:
        async with RolloutRunner(ScriptedPolicy(tasks), envs={ENV_ID: env}, group_size=rounds) as runner:
            start = time.perf_counter()
            groups = await runner.arun([(ENV_ID, t) for t in tasks])
            elapsed = time.perf_counter() - start
        assert all(r == 1.0 for g in groups for r in g.rewards), "a replayed solution did not earn 1"
        return elapsed

    return asyncio.run(run())


def ours_bare(env: WorkplaceEnv, tasks: list[dict[str, Any]], rounds: int) -> dict[str, float]:
    """Seconds spent starting, playing turns and scoring, over every task ``rounds`` times."""
    spent = {"start": 0.0, "turns": 0.0, "score": 0.0}
    scripts = [(t, script(t)) for t in tasks]

    async def run() -> None:
        clock = time.perf_counter
        for _ in range(rounds):
            for task, steps in scripts:
                t0 = clock()
                episode = await env.astart(env.load(task))
                t1 = clock()
                for text in steps:
                    await env.aadvance(episode, text)
                t2 = clock()
                (reward,) = await env.ascore_episodes([episode])
                await env.aend(episode)
                t3 = clock()
                assert reward.value == 1.0, (task["id"], reward)
                spent["start"] += t1 - t0
                spent["turns"] += t2 - t1
                spent["score"] += t3 - t2

    asyncio.run(run())
    return spent


# ----- reference: a dict of column lists --------------------------------------------------------


def load_columns(folder: Path) -> tuple[dict[str, Columns], list[str]]:
    tables: dict[str, Columns] = {}
    for name, spec in TABLES.items():
        with (folder / spec.file).open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader)
            columns: Columns = {c: [] for c in header}
            for cells in reader:
                for column, cell in zip(header, cells, strict=True):
                    columns[column].append((cell == "True") if column == "user_engaged" else (cell or None))
        tables[name] = columns
    tables["plots"] = {"file_path": []}
    directory = (folder / "email_addresses.csv").read_text(encoding="utf-8").split()
    return tables, directory


class Reference:
    """The 27 tools over column lists, as plainly as they can be written for the replayed calls."""

    def __init__(self, tables: dict[str, Columns], directory: list[str], now: str):
        self.t, self.directory, self.now = tables, directory, now

    def copy(self) -> Reference:
        return Reference(
            {n: {c: list(v) for c, v in cols.items()} for n, cols in self.t.items()}, self.directory, self.now
        )

    # generic row operations
    def rows(self, table: str) -> list[dict[str, Any]]:
        cols = self.t[table]
        return [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]

    def at(self, table: str, key: str, value: str) -> int:
        return self.t[table][key].index(value)

    def row(self, table: str, key: str, value: str) -> dict[str, Any]:
        i = self.at(table, key, value)
        return {c: v[i] for c, v in self.t[table].items()}

    def insert(self, table: str, values: dict[str, Any]) -> str:
        for column, cells in self.t[table].items():
            cells.append(values.get(column))
        return str(next(iter(values.values())))

    def delete(self, table: str, key: str, value: str) -> str:
        i = self.at(table, key, value)
        for cells in self.t[table].values():
            del cells[i]
        return "deleted"

    def set(self, table: str, key: str, value: str, field: str, new: str) -> str:
        self.t[table][field][self.at(table, key, value)] = new
        return "updated"

    def next_id(self, table: str, key: str, pad: bool = True) -> str:
        number = max(int(k) for k in self.t[table][key]) + 1
        return str(number).zfill(8) if pad else str(number)

    def send(self, recipient: str, subject: str, body: str) -> str:
        return self.insert(
            "email",
            {
                "email_id": self.next_id("email", "email_id", pad=False),
                "inbox/outbox": "outbox",
                "sender/recipient": recipient.lower(),
                "subject": subject,
                "sent_datetime": self.now,
                "body": body,
            },
        )

    def page(self, found: list[dict[str, Any]], noun: str, page: int = 1, page_size: int = 5) -> Any:
        return {f"{noun}s": found[(page - 1) * page_size : page * page_size], "total": len(found)}

    def per_day(
        self, time_min: str, time_max: str, value: Callable[[list[dict[str, Any]]], Any]
    ) -> dict[str, Any]:
        days: dict[str, list[dict[str, Any]]] = {}
        for r in self.rows("analytics"):
            if time_min <= r["date_of_visit"] <= time_max:
                days.setdefault(r["date_of_visit"], []).append(r)
        return {d: value(days[d]) for d in sorted(days)}

    # the tools
    def call(self, name: str, a: dict[str, Any]) -> Any:
        low = {k: str(v).lower() for k, v in a.items()}
        if name == "company_directory_find_email_address":
            return [d for d in self.directory if low["name"] in d]
        if name == "email_search_emails":
            found = [
                r
                for r in self.rows("email")
                if all(
                    w in f"{r['subject']} {r['body']} {r['sender/recipient']}".lower()
                    for w in low.get("query", "").split()
                )
                and a.get("date_min", "") <= r["sent_datetime"][:10] <= a.get("date_max", "9999")
            ]
            return self.page(sorted(found, key=lambda r: r["sent_datetime"], reverse=True), "email")
        if name == "email_get_email_information_by_id":
            return {a["field"]: self.row("email", "email_id", a["email_id"])[a["field"]]}
        if name == "email_send_email":
            return self.send(a["recipient"], a["subject"], a["body"])
        if name in ("email_forward_email", "email_reply_email"):
            r = self.row("email", "email_id", a["email_id"])
            if name == "email_reply_email":
                return self.send(r["sender/recipient"], f"RE: {r['subject']}", a["body"])
            return self.send(a["recipient"], f"FW: {r['subject']}", r["body"])
        if name == "email_delete_email":
            return self.delete("email", "email_id", a["email_id"])
        if name == "calendar_search_events":
            found = [
                r
                for r in self.rows("calendar")
                if (
                    low.get("query", "") in r["event_name"].lower()
                    or low.get("query", "") in r["participant_email"]
                )
                and a.get("time_min", "") <= r["event_start"] <= a.get("time_max", "9999")
            ]
            return self.page(sorted(found, key=lambda r: r["event_start"], reverse=True), "event")
        if name == "calendar_get_event_information_by_id":
            return {a["field"]: self.row("calendar", "event_id", a["event_id"])[a["field"]]}
        if name == "calendar_create_event":
            return self.insert(
                "calendar",
                {
                    "event_id": self.next_id("calendar", "event_id"),
                    **a,
                    "participant_email": low["participant_email"],
                },
            )
        if name == "calendar_update_event":
            return self.set("calendar", "event_id", a["event_id"], a["field"], a["new_value"])
        if name == "calendar_delete_event":
            return self.delete("calendar", "event_id", a["event_id"])
        if name == "analytics_get_visitor_information_by_id":
            return [r for r in self.rows("analytics") if r["visitor_id"] == a["visitor_id"]]
        if name == "analytics_create_plot":
            return self.insert(
                "plots",
                {"file_path": "plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png".format(**a)},
            )
        if name.startswith("analytics_"):
            source = a.get("traffic_source")
            counted: dict[str, Callable[[list[dict[str, Any]]], Any]] = {
                "analytics_total_visits_count": len,
                "analytics_engaged_users_count": lambda rs: sum(r["user_engaged"] for r in rs),
                "analytics_traffic_source_count": lambda rs: sum(r["traffic_source"] == source for r in rs),
                "analytics_get_average_session_duration": lambda rs: (
                    sum(float(r["session_duration_seconds"]) for r in rs) / len(rs)
                ),
            }
            return self.per_day(a.get("time_min", ""), a.get("time_max", "9999"), counted[name])
        if name == "project_management_search_tasks":
            return [
                r
                for r in self.rows("project_management")
                if all(v in str(r[k]).lower() for k, v in low.items() if k != "assigned_to_email")
                and low.get("assigned_to_email", r["assigned_to_email"]) == r["assigned_to_email"]
            ]
        if name == "project_management_get_task_information_by_id":
            return {a["field"]: self.row("project_management", "task_id", a["task_id"])[a["field"]]}
        if name == "project_management_create_task":
            return self.insert(
                "project_management",
                {
                    "task_id": self.next_id("project_management", "task_id"),
                    **a,
                    "assigned_to_email": low["assigned_to_email"],
                },
            )
        if name == "project_management_update_task":
            new = low["new_value"] if a["field"] == "assigned_to_email" else a["new_value"]
            return self.set("project_management", "task_id", a["task_id"], a["field"], new)
        if name == "project_management_delete_task":
            return self.delete("project_management", "task_id", a["task_id"])
        if name == "customer_relationship_manager_search_customers":
            bounds = {
                "last_contact_date_min",
                "last_contact_date_max",
                "follow_up_by_min",
                "follow_up_by_max",
            }
            found = [
                r
                for r in self.rows("customer_relationship_manager")
                if all(v in str(r[k]).lower() for k, v in low.items() if k not in bounds)
                and all(
                    r[k[:-4]] >= v if k.endswith("_min") else r[k[:-4]] <= v
                    for k, v in a.items()
                    if k in bounds
                )
            ]
            return self.page(found, "customer")
        table, key = "customer_relationship_manager", "customer_id"
        if name == "customer_relationship_manager_add_customer":
            return self.insert(
                table,
                {
                    key: self.next_id(table, key),
                    **a,
                    "assigned_to_email": low["assigned_to_email"],
                    "customer_email": low.get("customer_email"),
                },
            )
        if name == "customer_relationship_manager_update_customer":
            return self.set(table, key, a["customer_id"], a["field"], a["new_value"])
        if name == "customer_relationship_manager_delete_customer":
            return self.delete(table, key, a["customer_id"])
        raise KeyError(name)

    def cells(self) -> dict[str, dict[str, list[Any]]]:
        """Every cell, text case-folded, in order: what the reference comparison compares."""
        return {
            n: {c: [v.casefold() if isinstance(v, str) else v for v in cells] for c, cells in cols.items()}
            for n, cols in self.t.items()
        }


def reference_bare(template: Reference, tasks: list[dict[str, Any]], rounds: int) -> dict[str, float]:
    """The same episodes on the reference: copy, the same call texts parsed and run, then score."""
    spent = {"start": 0.0, "turns": 0.0, "score": 0.0}
    clock = time.perf_counter
    plans = [
        (
            script(t),
            [(c["name"], json.loads(c["arguments"])) for c in t["ground_truth"]],
            [item.casefold() for item in answer_items(t)],
        )
        for t in tasks
    ]
    for _ in range(rounds):
        for steps, truth, items in plans:
            t0 = clock()
            db = template.copy()
            t1 = clock()
            for text in steps:
                if "<tool_call>" in text:
                    call = json.loads(text[len("<tool_call>") : -len("</tool_call>")])
                    json.dumps(db.call(call["name"], call["arguments"]), default=str)
            t2 = clock()
            expected = template.copy()
            for name, arguments in truth:
                expected.call(name, arguments)
            reply = steps[-1].casefold()
            equal = expected.cells() == db.cells() and all(item in reply for item in items)
            t3 = clock()
            assert equal, steps
            spent["start"] += t1 - t0
            spent["turns"] += t2 - t1
            spent["score"] += t3 - t2
    return spent


# ----- SQLite: copy and comparison ----------------------------------------------------------------


def sqlite_template(tables: dict[str, Columns]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    for name, cols in tables.items():
        quoted = ", ".join(f'"{c}"' for c in cols)
        db.execute(f'CREATE TABLE "{name}" ({quoted})')
        db.executemany(
            f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(cols))})', zip(*cols.values(), strict=True)
        )
    db.commit()
    return db


def sqlite_copy(template: sqlite3.Connection, uri: str = ":memory:") -> sqlite3.Connection:
    db = sqlite3.connect(uri, uri=uri != ":memory:")
    template.backup(db)
    return db


def sqlite_equal(db: sqlite3.Connection, names: list[str]) -> bool:
    """Every table of ``main`` and the attached ``expected`` holds the same rows (EXCEPT both ways)."""
    for name in names:
        for left, right in (("main", "expected"), ("expected", "main")):
            query = (
                f'SELECT 1 FROM (SELECT * FROM {left}."{name}" EXCEPT SELECT * FROM {right}."{name}") LIMIT 1'
            )
            if db.execute(query).fetchone():
                return False
    return True


# ----- measuring ----------------------------------------------------------------------------------


def per_op_us(fn: Callable[[], Any], number: int, repeats: int = 5) -> float:
    """Best of ``repeats`` of the mean time of ``fn`` over ``number`` calls, in microseconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best * 1e6


def comparison_case(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The task with the most ground-truth deletes (all on one table), for the three comparisons."""
    task = max(tasks, key=lambda t: sum(c["name"] == "calendar_delete_event" for c in t["ground_truth"]))
    ids = [json.loads(c["arguments"])["event_id"] for c in task["ground_truth"]]
    return {"task": task, "ids": ids}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="times each bundled task is played")
    args = parser.parse_args()
    folder = bundled_tables()
    env = WorkplaceEnv()
    tasks = [t.row for t in env.tasks or []]
    episodes = len(tasks) * args.rounds
    turns = sum(len(t["solution"]) + 1 for t in tasks) * args.rounds

    ours_bare(env, tasks, 1)  # warm up
    runner_s = ours_runner(env, tasks, args.rounds)
    ours = ours_bare(env, tasks, args.rounds)
    columns, directory = load_columns(folder)
    clock = task_clock(prompt_messages(tasks[0]))  # every bundled task shares one "today"
    reference = Reference(columns, directory, clock.strftime("%Y-%m-%d %H:%M:%S"))
    ref = reference_bare(reference, tasks, args.rounds)

    template: Workplace = env.workplace
    sqlite = sqlite_template(columns)
    fresh_us = per_op_us(template.fresh, 20_000)
    ref_copy_us = per_op_us(reference.copy, 500)
    sqlite_copy_us = per_op_us(lambda: sqlite_copy(sqlite).close(), 500)

    case = comparison_case(tasks)
    expected, actual = template.fresh(), template.fresh()
    for db in (expected, actual):
        for event_id in case["ids"]:
            db["calendar"].delete(event_id)
    assert compare(expected.snapshot(), actual.snapshot()).equal
    compare_us = per_op_us(lambda: compare(expected.snapshot(), actual.snapshot()), 20_000)
    ref_expected, ref_actual = reference.copy(), reference.copy()
    for db_ref in (ref_expected, ref_actual):
        for event_id in case["ids"]:
            db_ref.call("calendar_delete_event", {"event_id": event_id})
    ref_compare_us = per_op_us(lambda: ref_expected.cells() == ref_actual.cells(), 500)
    sql_actual = sqlite_copy(sqlite, "file:bench_actual?mode=memory&cache=shared")
    sql_expected = sqlite_copy(sqlite, "file:bench_expected?mode=memory&cache=shared")
    for db_sql in (sql_actual, sql_expected):
        db_sql.executemany("DELETE FROM calendar WHERE event_id = ?", [(i,) for i in case["ids"]])
        db_sql.commit()
    sql_actual.execute("ATTACH DATABASE 'file:bench_expected?mode=memory&cache=shared' AS expected")
    names = list(columns)
    assert sqlite_equal(sql_actual, names)
    sqlite_compare_us = per_op_us(lambda: sqlite_equal(sql_actual, names), 500)

    question = max(tasks, key=lambda t: len(answer_items(t)) + len(t.get("distractors", [])))
    answer = ExpectedAnswer.from_row(question)
    assert answer is not None
    reply, items = script(question)[-1], [item.casefold() for item in answer_items(question)]
    assert answer.check(reply)[0]
    answer_us = per_op_us(lambda: answer.check(reply), 2_000)
    ref_answer_us = per_op_us(lambda: all(item in reply.casefold() for item in items), 20_000)

    def us(seconds: float, count: int) -> float:
        return seconds / count * 1e6

    ours_episode = us(sum(ours.values()), episodes)
    ref_episode = us(sum(ref.values()), episodes)
    rows = [
        ("episode, RolloutRunner", us(runner_s, episodes), ref_episode, None),
        ("episode, bare env loop", ours_episode, ref_episode, None),
        ("  start (episode's tables)", us(ours["start"], episodes), us(ref["start"], episodes), None),
        ("  turns (parse, run, render)", us(ours["turns"], episodes), us(ref["turns"], episodes), None),
        ("  scoring (truth + compare)", us(ours["score"], episodes), us(ref["score"], episodes), None),
        ("per turn", us(ours["turns"], turns), us(ref["turns"], turns), None),
        ("fresh copy of the tables", fresh_us, ref_copy_us, sqlite_copy_us),
        ("one state comparison", compare_us, ref_compare_us, sqlite_compare_us),
        ("one answer check", answer_us, ref_answer_us, None),
    ]
    print(
        f"{len(tasks)} bundled tasks x {args.rounds} rounds = {episodes} episodes, {turns} turns; "
        f"tables: {sum(len(t) for t in template.tables.values())} rows"
    )
    print(
        f"RolloutRunner: {episodes / runner_s:,.0f} episodes/s; bare env loop: "
        f"{episodes / sum(ours.values()):,.0f} episodes/s; reference loop: {episodes / sum(ref.values()):,.0f} episodes/s"
    )
    print(f"{'microseconds':<32}{'ours':>10}{'dict-of-lists':>15}{'ratio':>8}{'sqlite':>10}{'ratio':>8}")
    for label, mine, plain, sql in rows:
        tail = f"{sql:>10.1f}{mine / sql:>7.2f}x" if sql is not None else ""
        print(f"{label:<32}{mine:>10.1f}{plain:>15.1f}{mine / plain:>7.2f}x{tail}")
    print(
        f"comparison case: task {case['task']['id']} ({len(case['ids'])} calendar deletes on both sides); "
        f"answer check: task {question['id']} ({len(answer.items)} items, {len(answer.distractors)} distractors)"
    )
    env.close()


if __name__ == "__main__":
    main()
