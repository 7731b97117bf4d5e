"""The 27 workplace tools on the WorkBench tables: schemas, exact outputs, errors, limits, state copies.

Expected values are either counted here from the CSVs with the ``csv`` module, or taken from what
NeMo Gym's server returned for the same call in ``example_rollouts.jsonl`` (said where).
"""

from __future__ import annotations

import asyncio
import csv
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from cascade_envs.envs.workplace import analytics, calendar, crm, directory, email, project_management
from cascade_envs.envs.workplace.common import MAX_PAGE_SIZE, MAX_TEXT_CHARS
from cascade_envs.envs.workplace.tables import MAX_NEW_ROWS, PLOTS, TablesError, Workplace
from cascade_envs.envs.workplace.toolset import WRITE_TOOLS, make_toolbox
from cascade_envs.tools import ToolCall, ToolError

DEFINITIONS = (
    "company_directory",
    "email",
    "calendar",
    "analytics",
    "project_management",
    "customer_relationship_manager",
)


@pytest.fixture(scope="module")
def folder(shared_data: Path) -> Path:
    return shared_data / "workplace-tables"


@pytest.fixture(scope="module")
def template(folder: Path) -> Workplace:
    return Workplace.load(folder)


@pytest.fixture
def db(template: Workplace) -> Workplace:
    return template.fresh()


def _csv(folder: Path, name: str) -> list[dict[str, str]]:
    with (folder / name).open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ----- schemas ------------------------------------------------------------------------------------


def test_derived_schemas_match_the_workbench_definitions(folder):
    toolbox = make_toolbox()
    defined = []
    for name in DEFINITIONS:
        for spec in json.loads((folder / f"{name}.json").read_text())["tools"]:
            defined.append(spec["name"])
            ours = toolbox[spec["name"]].parameters
            theirs = spec["parameters"]
            assert list(ours["properties"]) == list(theirs["properties"]), spec["name"]
            for argument, schema in theirs["properties"].items():
                assert ours["properties"][argument]["type"] == schema["type"], (spec["name"], argument)
                assert ours["properties"][argument]["description"], (spec["name"], argument)
            assert sorted(ours["required"]) == sorted(theirs["required"]), spec["name"]
            assert ours["additionalProperties"] is False
            assert "db" not in ours["properties"]
    assert list(toolbox.names) == defined and len(defined) == 27


def test_write_tools_are_the_definitions_creates_updates_and_deletes(folder):
    writes = {
        spec["name"]
        for name in DEFINITIONS
        for spec in json.loads((folder / f"{name}.json").read_text())["tools"]
        if spec["operation_type"] != "read"
    }
    assert writes == WRITE_TOOLS and len(writes) == 14


# ----- directory ----------------------------------------------------------------------------------


def test_directory_lookups(db):
    find = directory.company_directory_find_email_address
    assert find(db, name="Nadia") == ["nadia.moreau@atlas.com"]  # NeMo Gym's answer in rollout 4
    assert find(db, name="PATEL") == ["anaya.patel@atlas.com", "raj.patel@atlas.com"]
    assert find(db, name="k.f") == []  # literal: as a regular expression it would match kofi.mensah
    assert find(db, name="nobody") == []
    with pytest.raises(ToolError, match="Name not provided"):
        find(db)


def test_directory_sources(folder, tmp_path):
    derived = Workplace.load(folder).directory  # WorkBench's folder has no address list
    team = {
        r["assigned_to_email"]
        for f in ("project_tasks.csv", "customer_relationship_manager_data.csv")
        for r in _csv(folder, f)
    }
    assert list(derived) == sorted(team) and len(derived) == 20
    copy = tmp_path / "tables"
    shutil.copytree(folder, copy)
    (copy / "company_directory.json").write_text(json.dumps({"email_addresses": ["b@x.io", "a@x.io"]}))
    assert Workplace.load(copy).directory == ("b@x.io", "a@x.io")
    (copy / "email_addresses.csv").write_text("zed@x.io\namy@x.io\n")
    assert Workplace.load(copy).directory == ("zed@x.io", "amy@x.io")  # WorkBench's raw file wins, in order


# ----- email --------------------------------------------------------------------------------------


def test_email_reads(db, folder):
    get = email.email_get_email_information_by_id
    assert get(db, email_id="00000057", field="subject") == {
        "subject": "Task Update on Develop prototype for report generation"
    }
    with pytest.raises(ToolError, match=r"Field 'date' not found\. Available fields: email_id, inbox/outbox"):
        get(db, email_id="00000057", field="date")
    with pytest.raises(ToolError, match=r"^Email not found\.$"):
        get(db, email_id="99999999", field="subject")
    with pytest.raises(ToolError, match="Email ID not provided"):
        get(db, email_id="", field="subject")


def test_email_search_pages_newest_first(db, folder):
    search = email.email_search_emails
    kofi = [
        r
        for r in _csv(folder, "emails.csv")
        if "kofi" in f"{r['subject']} {r['body']} {r['sender/recipient']}".lower()
    ]
    first = search(db, query="kofi", page=1, page_size=1)
    assert first["pagination"] == {
        "total_emails": len(kofi),
        "page": 1,
        "page_size": 1,
        "total_pages": len(kofi),
    }
    assert first["emails"][0]["email_id"] == "00000259"  # as NeMo Gym returned in rollout 5
    assert first["emails"][0]["sent_datetime"] == max(r["sent_datetime"] for r in kofi)
    last = search(db, query="Kofi", page=999, page_size=5)  # the page is clamped to the last one
    assert last["pagination"]["page"] == -(-len(kofi) // 5)
    assert len(last["emails"]) == (len(kofi) % 5 or 5)
    big = search(db, page_size=10_000)
    assert big["pagination"]["page_size"] == MAX_PAGE_SIZE and len(big["emails"]) == MAX_PAGE_SIZE
    with pytest.raises(ToolError, match="page_size must be at least 1"):
        search(db, page_size=0)
    assert search(db, query="kofi zzzunknownword") == "No emails found."


def test_email_search_date_bounds_are_inclusive_days(db, folder):
    days = Counter(r["sent_datetime"][:10] for r in _csv(folder, "emails.csv"))
    found = email.email_search_emails(db, date_min="2023-11-29", date_max="2023-11-30", page_size=50)
    assert found["pagination"]["total_emails"] == days["2023-11-29"] + days["2023-11-30"]
    only = email.email_search_emails(db, date_min="2023-11-29 18:00:00", date_max="2023-11-29", page_size=50)
    assert only["pagination"]["total_emails"] == days["2023-11-29"]  # the time part is ignored
    with pytest.raises(ToolError, match="Invalid date_min"):
        email.email_search_emails(db, date_min="last tuesday")


def test_email_send_reply_forward_delete(db, template):
    db.now = template.now.replace(hour=23, minute=59, second=0)
    assert (
        email.email_send_email(db, recipient="Nadia.Moreau@atlas.com", subject="Hi", body="Hello")
        == "Email sent successfully."
    )
    sent = db["email"].get("500")  # NeMo Gym: the largest id plus one, not zero-padded
    assert sent == {
        "email_id": "500",
        "inbox/outbox": "outbox",
        "sender/recipient": "nadia.moreau@atlas.com",
        "subject": "Hi",
        "sent_datetime": "2023-11-30 23:59:00",
        "body": "Hello",
    }
    assert email.email_reply_email(db, email_id="00000057", body="Thanks") == "Email replied successfully."
    original = db["email"].get("00000057")
    assert db["email"].get("501") == {
        **sent,
        "email_id": "501",
        "sender/recipient": original["sender/recipient"],
        "subject": f"RE: {original['subject']}",
        "body": "Thanks",
    }
    assert (
        email.email_forward_email(db, email_id="00000057", recipient="raj.patel@atlas.com")
        == "Email forwarded successfully."
    )
    assert db["email"].get("502")["subject"] == f"FW: {original['subject']}"
    assert db["email"].get("502")["body"] == original["body"]
    assert email.email_delete_email(db, email_id="00000057") == "Email deleted successfully."
    assert db["email"].get("00000057") is None and len(db["email"]) == len(template["email"]) + 2
    assert template["email"].get("00000057") is not None and len(template["email"]) == 500


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (
            lambda db: email.email_send_email(db, recipient="nobody", subject="s", body="b"),
            "Invalid recipient",
        ),
        (
            lambda db: email.email_send_email(db, recipient="a@b.io", subject="", body="b"),
            "Recipient, subject, or body",
        ),
        (lambda db: email.email_reply_email(db, email_id="123", body="b"), "^Email not found.$"),
        (lambda db: email.email_forward_email(db, email_id="00000057", recipient="x"), "Invalid recipient"),
        (lambda db: email.email_delete_email(db, email_id="00000001x"), "^Email not found.$"),
        (
            lambda db: email.email_send_email(
                db, recipient="a@b.io", subject="s", body="x" * (10 * 1024 * 1024)
            ),
            f"argument 'body' has 10,485,760 characters; the limit is {MAX_TEXT_CHARS:,}",
        ),
    ],
)
def test_email_errors_change_nothing(db, template, call, error):
    with pytest.raises(ToolError, match=error):
        call(db)
    assert db.snapshot()["email"].rows is template.snapshot()["email"].rows


# ----- calendar -----------------------------------------------------------------------------------


def test_calendar_reads_and_search_by_start(db, folder):
    assert calendar.calendar_get_event_information_by_id(db, event_id="00000252", field="event_name") == {
        "event_name": "brainstorming session"
    }
    with pytest.raises(ToolError, match="Invalid event ID format"):
        calendar.calendar_get_event_information_by_id(db, event_id="252", field="event_name")
    with pytest.raises(ToolError, match=r"Invalid field\. Available fields are: event_id, event_name"):
        calendar.calendar_get_event_information_by_id(db, event_id="00000252", field="room")
    day = sorted(
        (r for r in _csv(folder, "calendar_events.csv") if r["event_start"].startswith("2023-12-01")),
        key=lambda r: r["event_start"],
        reverse=True,
    )
    found = calendar.calendar_search_events(
        db, time_min="2023-12-01", time_max="2023-12-01 23:59:59", page_size=20
    )
    assert [e["event_id"] for e in found["events"]] == [r["event_id"] for r in day]
    assert (
        found["events"][0]["event_id"] == "00000252"
    )  # "the last event on December 1" (row 1's ground truth)
    assert (
        calendar.calendar_search_events(db, time_min="2023-12-01", time_max="2023-12-01")
        == "No events found."
    )
    named = calendar.calendar_search_events(db, query="SYNC UP", page_size=50)
    assert all(e["event_name"] == "sync up" for e in named["events"])
    with pytest.raises(ToolError, match="Invalid time_max format"):
        calendar.calendar_search_events(db, time_max="noon")


def test_calendar_writes(db):
    new = calendar.calendar_create_event(
        db,
        event_name="Sync",
        participant_email="Raj.Patel@atlas.com",
        event_start="2023-12-04 10:00:00",
        duration="30",
    )
    assert new == "00000300"
    assert db["calendar"].get(new) == {
        "event_id": "00000300",
        "event_name": "Sync",
        "participant_email": "raj.patel@atlas.com",
        "event_start": "2023-12-04 10:00:00",
        "duration": "30",
    }
    assert (
        calendar.calendar_update_event(
            db, event_id=new, field="participant_email", new_value="NIA.johnson@atlas.com"
        )
        == "Event updated successfully."
    )
    assert db["calendar"].get(new)["participant_email"] == "nia.johnson@atlas.com"
    for field, value, error in [
        ("event_start", "tomorrow", "Invalid event_start format"),
        ("duration", "half an hour", "Invalid duration format"),
        ("duration", "-5", "Duration must be a positive number"),
        ("room", "A", "Invalid field"),
    ]:
        with pytest.raises(ToolError, match=error):
            calendar.calendar_update_event(db, event_id=new, field=field, new_value=value)
    with pytest.raises(ToolError, match=r"^Event not found\.$"):
        calendar.calendar_update_event(db, event_id="00009999", field="duration", new_value="30")
    assert calendar.calendar_delete_event(db, event_id=new) == "Event deleted successfully."
    with pytest.raises(ToolError, match=r"^Event not found\.$"):
        calendar.calendar_delete_event(db, event_id=new)


# ----- analytics ----------------------------------------------------------------------------------


def test_analytics_counts_per_day(db, folder):
    visits = [
        r for r in _csv(folder, "analytics_data.csv") if "2023-11-25" <= r["date_of_visit"] <= "2023-11-30"
    ]
    days = sorted({r["date_of_visit"] for r in visits})
    per_day = {d: [r for r in visits if r["date_of_visit"] == d] for d in days}
    window = {"time_min": "2023-11-25", "time_max": "2023-11-30"}
    assert analytics.analytics_total_visits_count(db, **window) == {d: len(v) for d, v in per_day.items()}
    assert analytics.analytics_engaged_users_count(db, **window) == {
        d: sum(r["user_engaged"] == "True" for r in v) for d, v in per_day.items()
    }
    referral = analytics.analytics_traffic_source_count(db, traffic_source="referral", **window)
    assert referral == {d: sum(r["traffic_source"] == "referral" for r in v) for d, v in per_day.items()}
    assert 0 in referral.values()  # days without such a visit are listed with 0
    assert analytics.analytics_traffic_source_count(db, **window) == {d: len(v) for d, v in per_day.items()}
    averages = analytics.analytics_get_average_session_duration(db, **window)
    assert averages == pytest.approx(
        {d: sum(float(r["session_duration_seconds"]) for r in v) / len(v) for d, v in per_day.items()}
    )
    assert len(analytics.analytics_total_visits_count(db)) == len(
        {r["date_of_visit"] for r in _csv(folder, "analytics_data.csv")}
    )


def test_analytics_visitors_and_plots(db):
    assert analytics.analytics_get_visitor_information_by_id(db, visitor_id="0860") == [
        {
            "date_of_visit": "2023-10-22",
            "visitor_id": "0860",
            "page_views": "8",
            "session_duration_seconds": "4",
            "traffic_source": "referral",
            "user_engaged": False,
        }
    ]
    with pytest.raises(ToolError, match=r"^Visitor not found\.$"):
        analytics.analytics_get_visitor_information_by_id(db, visitor_id="860")
    path = analytics.analytics_create_plot(
        db, time_min="2023-11-30", time_max="2024-06-30", value_to_plot="total_visits", plot_type="bar"
    )
    assert path == "plots/2023-11-30_2024-06-30_total_visits_bar.png"  # as NeMo Gym returned in rollout 1
    assert [row["file_path"] for row in db[PLOTS]] == [path]
    with pytest.raises(ToolError, match="Value to plot must be one of"):
        analytics.analytics_create_plot(
            db, time_min="a", time_max="b", value_to_plot="visits", plot_type="bar"
        )
    with pytest.raises(ToolError, match="Plot type must be one of"):
        analytics.analytics_create_plot(
            db, time_min="a", time_max="b", value_to_plot="user_engaged", plot_type="pie"
        )
    with pytest.raises(ToolError, match="Start date not provided"):
        analytics.analytics_create_plot(
            db, time_min="", time_max="b", value_to_plot="user_engaged", plot_type="bar"
        )


# ----- project management -------------------------------------------------------------------------


def test_project_tasks_search(db, folder):
    search = project_management.project_management_search_tasks
    leila = [
        r
        for r in _csv(folder, "project_tasks.csv")
        if r["assigned_to_email"] == "leila.azizi@atlas.com" and r["list_name"] == "Backlog"
    ]
    assert search(db, assigned_to_email="LEILA.azizi@atlas.com", list_name="backlog") == leila
    assert search(db, assigned_to_email="azizi@atlas.com") == []  # the whole address, not a part of it
    with pytest.raises(ToolError, match="Invalid email format"):
        search(db, assigned_to_email="leila")
    with pytest.raises(ToolError, match="No search parameters provided"):
        search(db)
    assert project_management.project_management_get_task_information_by_id(
        db, task_id="00000149", field="board"
    ) == {"board": "Front end"}


def test_project_tasks_writes(db):
    create = project_management.project_management_create_task
    details = {
        "task_name": "Write tests",
        "assigned_to_email": "Leila.Azizi@atlas.com",
        "list_name": "Backlog",
        "due_date": "2023-12-15",
        "board": "Front end",
    }
    assert create(db, **details) == "00000300"
    assert db["project_management"].get("00000300")["assigned_to_email"] == "leila.azizi@atlas.com"
    for change, error in [
        ({"assigned_to_email": "someone@else.com"}, "Assignee email not valid"),
        ({"list_name": "Done"}, "List not valid"),
        ({"board": "Mobile"}, "Board not valid"),
        ({"due_date": ""}, "Missing task details"),
    ]:
        with pytest.raises(ToolError, match=error):
            create(db, **{**details, **change})
    update = project_management.project_management_update_task
    assert (
        update(db, task_id="00000149", field="list_name", new_value="In Review")
        == "Task updated successfully."
    )
    assert db["project_management"].get("00000149")["list_name"] == "In Review"
    with pytest.raises(ToolError, match="List not valid"):
        update(db, task_id="00000149", field="list_name", new_value="in review")
    with pytest.raises(ToolError, match="Field not valid"):
        update(db, task_id="00000149", field="task_id", new_value="00000001")
    with pytest.raises(ToolError, match=r"^Task not found\.$"):
        update(db, task_id="12345678", field="board", new_value="Design")
    assert (
        project_management.project_management_delete_task(db, task_id="00000149")
        == "Task deleted successfully."
    )


# ----- CRM ----------------------------------------------------------------------------------------


def test_crm_search(db, folder):
    search = crm.customer_relationship_manager_search_customers
    casey = search(
        db, customer_name="Casey Wilson", page=1, page_size=1
    )  # rollout 3's call and NeMo Gym's answer
    assert casey == {
        "customers": [
            {
                "customer_id": "00000014",
                "assigned_to_email": "akira.sato@atlas.com",
                "customer_name": "Casey Wilson",
                "customer_email": "casey.wilson@ultradynamics",
                "customer_phone": None,
                "last_contact_date": "2023-10-09 23:59:00",
                "product_interest": "Hardware",
                "status": "Qualified",
                "follow_up_by": "2023-10-29 23:59:00",
                "notes": "2023-10-18: Met in person. ",
            }
        ],
        "pagination": {"total_customers": 1, "page": 1, "page_size": 1, "total_pages": 1},
    }
    rows = _csv(folder, "customer_relationship_manager_data.csv")
    # date bounds compare text, as NeMo Gym does: "2023-11-20 23:59:00" > "2023-11-20"
    through = search(db, last_contact_date_max="2023-11-20", page_size=50)
    assert through["pagination"]["total_customers"] == sum(
        r["last_contact_date"] <= "2023-11-20" for r in rows
    )
    assert (
        search(db, status="Proposal", product_interest="consulting", last_contact_date_max="2023-11-09")
        == "No customers found."
    )  # rollout 2's call and NeMo Gym's answer
    with pytest.raises(ToolError, match="No search parameters provided"):
        search(db, page=2)


def test_crm_writes(db):
    add = crm.customer_relationship_manager_add_customer
    new = add(db, customer_name="Dakota Thomas", assigned_to_email="Nadia.Moreau@atlas.com", status="Lead")
    assert new == "00000200"  # as NeMo Gym returned in rollout 4
    assert db["customer_relationship_manager"].get(new) == {
        "customer_id": "00000200",
        "assigned_to_email": "nadia.moreau@atlas.com",
        "customer_name": "Dakota Thomas",
        "customer_email": None,
        "customer_phone": None,
        "last_contact_date": None,
        "product_interest": None,
        "status": "Lead",
        "follow_up_by": None,
        "notes": None,
    }
    update = crm.customer_relationship_manager_update_customer
    assert (
        update(db, customer_id=new, field="customer_email", new_value="Dakota@Example.com")
        == "Customer updated successfully."
    )
    assert db["customer_relationship_manager"].get(new)["customer_email"] == "dakota@example.com"
    for field, value, error in [
        ("status", "lost", "Status not valid"),
        ("product_interest", "Cloud", "Product interest not valid"),
        ("customer_id", "00000001", "Field not valid"),
        ("mood", "happy", "Field not valid"),
    ]:
        with pytest.raises(ToolError, match=error):
            update(db, customer_id=new, field=field, new_value=value)
    with pytest.raises(ToolError, match=r"^Customer not found\.$"):
        update(db, customer_id="00000999", field="status", new_value="Lost")
    assert (
        crm.customer_relationship_manager_delete_customer(db, customer_id=new)
        == "Customer deleted successfully."
    )
    with pytest.raises(ToolError, match=r"^Customer not found\.$"):
        crm.customer_relationship_manager_delete_customer(db, customer_id=new)


# ----- through the toolbox ------------------------------------------------------------------------


def test_toolbox_calls_render_results_and_errors(db):
    toolbox = make_toolbox()

    def run(name, **arguments):
        return asyncio.run(toolbox.acall(ToolCall(name, arguments, "c1"), {"db": db}))

    found = run("email_search_emails", query="kofi", page=1, page_size=1)
    assert found.ok and json.loads(found.content)["emails"][0]["email_id"] == "00000259"
    missing = run("email_delete_email", email_id="nope")
    assert not missing.ok and missing.content == "Error: Email not found."
    typed = run("email_search_emails", page="1")
    assert not typed.ok and "page" in typed.content
    hidden = run("email_delete_email", email_id="00000057", db="x")
    assert not hidden.ok and "db" in hidden.content and db["email"].get("00000057") is not None
    assert (
        run(
            "calendar_create_event",
            event_name="A",
            participant_email="a@b.io",
            event_start="2023-12-01 10:00",
            duration="30",
        ).content
        == "00000300"
    )
    assert missing.message() == {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "email_delete_email",
        "content": "Error: Email not found.",
    }


# ----- the state: copies, snapshots, limits, bad folders ------------------------------------------


def test_fresh_copies_share_nothing_that_changes(template):
    one, two = template.fresh(), template.fresh()
    before = template.snapshot()
    crm.customer_relationship_manager_delete_customer(one, customer_id="00000014")
    email.email_send_email(two, recipient="a@b.io", subject="s", body="b")
    assert (
        "00000014" not in one["customer_relationship_manager"]
        and "00000014" in two["customer_relationship_manager"]
    )
    assert len(one["email"]) == 500 and len(two["email"]) == 501
    after = template.snapshot()
    assert all(after[name].rows is before[name].rows for name in before)  # the template never changes
    frozen = one.snapshot()
    crm.customer_relationship_manager_delete_customer(one, customer_id="00000015")
    assert "00000015" in frozen["customer_relationship_manager"].rows  # a snapshot does not move


def test_a_table_grows_by_at_most_max_new_rows(db):
    for _ in range(MAX_NEW_ROWS):
        analytics.analytics_create_plot(
            db, time_min="a", time_max="b", value_to_plot="user_engaged", plot_type="bar"
        )
    with pytest.raises(ToolError, match="table is full"):
        analytics.analytics_create_plot(
            db, time_min="a", time_max="b", value_to_plot="user_engaged", plot_type="bar"
        )
    assert len(db[PLOTS]) == MAX_NEW_ROWS


def test_bad_tables_folders(folder, tmp_path):
    with pytest.raises(TablesError, match="not found"):
        Workplace.load(tmp_path / "nowhere")
    copy = tmp_path / "tables"
    shutil.copytree(folder, copy)
    (copy / "project_tasks.csv").write_text("task_id,task_name\n1,a\n")
    with pytest.raises(TablesError, match=r"project_tasks.csv: missing column\(s\) \['assigned_to_email'"):
        Workplace.load(copy)
    (copy / "project_tasks.csv").unlink()
    with pytest.raises(TablesError, match=r"has no project_tasks\.csv"):
        Workplace.load(copy)
