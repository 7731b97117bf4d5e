"""Write the workplace env's bundled tables: a small fictional company, Fernbrook Analytics.

Deterministic (seeded). The tables keep WorkBench's file names and columns, so the same 27 tools
work on them; every name, address, subject and text here was written for this project. The
tasks that refer to these rows are built from them by ``make_workplace_tasks.py``; run that
script, which calls this one first:

    python bench/data/make_workplace_tasks.py
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[2] / "envs" / "workplace" / "data" / "tables"
TODAY = date(2025, 11, 13)  # a Thursday
NOW = "2025-11-13 23:59:00"
DOMAIN = "fernbrook.io"
USER = "Morgan"
SEED = 20251113

Row = dict[str, str]


@dataclass(frozen=True)
class Person:
    first: str
    last: str
    team: str

    @property
    def email(self) -> str:
        return f"{self.first.lower()}.{self.last.lower()}@{DOMAIN}"


PEOPLE = [
    Person("Nadia", "Rahimi", "sales"),
    Person("Oscar", "Ferreira", "sales"),
    Person("Amara", "Nwosu", "sales"),
    Person("Julien", "Moreau", "sales"),
    Person("Sunita", "Rao", "sales"),
    Person("Ingrid", "Haugen", "Front end"),
    Person("Mateo", "Alvarez", "Front end"),
    Person("Zara", "Qureshi", "Front end"),
    Person("Dmitri", "Volkov", "Back end"),
    Person("Samuel", "Adeyemi", "Back end"),
    Person("Kenji", "Morimoto", "Back end"),
    Person("Felix", "Wagner", "Back end"),
    Person("Lucia", "Bianchi", "Design"),
    Person("Meiling", "Park", "Design"),
    Person("Noor", "Haddad", "Design"),
    Person("Grace", "Owusu", "marketing"),
    Person("Ethan", "Caldwell", "marketing"),
    Person("Victor", "Hale", "finance"),
    Person("Hannah", "Brooks", "people"),
    Person("Hannah", "Kim", "data"),
    Person("Tomas", "Lindqvist", "product"),
    Person("Priyanka", "Iyer", "engineering"),
]
BY_NAME = {f"{p.first} {p.last}": p for p in PEOPLE}


def person(name: str) -> Person:
    """A person by first name (unique ones) or full name."""
    if name in BY_NAME:
        return BY_NAME[name]
    (match,) = [p for p in PEOPLE if p.first == name]
    return match


def team(name: str) -> list[Person]:
    return [p for p in PEOPLE if p.team == name]


# ----- project tasks ------------------------------------------------------------------------------

TASK_NAMES = {
    "Front end": [
        "Add dark mode toggle to settings page",
        "Fix date picker timezone offset",
        "Lazy-load dashboard charts",
        "Replace legacy modal component",
        "Keyboard navigation for report table",
        "Skeleton loaders on account page",
        "Upgrade charting library to v5",
        "Fix truncated labels in export dialog",
        "Responsive layout for billing page",
        "Empty states for search results",
        "Localize onboarding checklist",
        "Reduce bundle size of admin app",
        "Inline validation on signup form",
        "Sticky header on long reports",
        "Copy-to-clipboard for API keys",
        "Show sync status in sidebar",
        "Fix flicker when switching workspaces",
        "Print stylesheet for invoices",
        "Add breadcrumbs to settings",
        "Drag-and-drop dashboard widgets",
    ],
    "Back end": [
        "Migrate job queue to managed Redis",
        "Add rate limiting to public API",
        "Rotate database credentials",
        "Paginate audit log endpoint",
        "Backfill usage metrics for September",
        "Set up feature flag service",
        "Fix duplicate webhook deliveries",
        "Add retries to invoice export",
        "Index customer events by account",
        "Upgrade Postgres to 16",
        "Write runbook for failover drill",
        "Health check for ingestion workers",
        "Archive stale report snapshots",
        "Streaming export for large datasets",
        "Tighten CORS rules on admin API",
        "Move cron jobs to scheduler service",
        "Deduplicate contacts on import",
        "Cache tenant settings lookups",
        "Alert on slow queries over 2s",
        "Remove deprecated v1 endpoints",
    ],
    "Design": [
        "Refresh pricing page illustrations",
        "Icon set for new integrations",
        "Usability test script for onboarding",
        "Design tokens for spacing scale",
        "Mockups for team invitations flow",
        "Accessibility audit of color palette",
        "Email template for renewal reminders",
        "Empty-state illustrations",
        "Wireframes for usage reports",
        "Motion guidelines for dashboards",
        "Redesign notification center",
        "Brand refresh for conference booth",
        "Mobile layout for approvals",
        "Chart color scheme for dark mode",
        "Error page illustrations",
    ],
}
LISTS = ["Backlog", "In Progress", "In Review", "Completed"]


def project_tasks(rng: random.Random) -> list[Row]:
    rows = []
    for board, names in TASK_NAMES.items():
        members = team(board)
        for i, name in enumerate(names):
            owner = members[i % len(members)]
            due = TODAY + timedelta(days=rng.randrange(-12, 30))
            rows.append(
                {
                    "task_name": name,
                    "assigned_to_email": owner.email,
                    "list_name": rng.choices(LISTS, weights=[4, 3, 2, 2])[0],
                    "due_date": due.isoformat(),
                    "board": board,
                }
            )
    # rows the tasks rely on, pinned whatever the draw gave
    pin(rows, "Migrate job queue to managed Redis", list_name="In Progress", due_date="2025-11-21")
    pin(rows, "Set up feature flag service", list_name="Backlog", due_date="2025-12-05")
    pin(rows, "Write runbook for failover drill", list_name="In Review", due_date="2025-11-19")
    pin(rows, "Fix duplicate webhook deliveries", list_name="In Progress", due_date="2025-11-10")
    pin(rows, "Cache tenant settings lookups", list_name="In Progress", due_date="2025-11-07")
    pin(rows, "Upgrade Postgres to 16", list_name="In Progress", due_date="2025-11-28")
    pin(rows, "Redesign notification center", list_name="Completed")
    pin(rows, "Streaming export for large datasets", list_name="Backlog")
    pin(rows, "Add rate limiting to public API", list_name="In Review")
    return rows


def pin(rows: list[Row], task_name: str, **fields: str) -> None:
    (row,) = [r for r in rows if r["task_name"] == task_name]
    row.update(fields)


# ----- CRM ----------------------------------------------------------------------------------------

COMPANIES = {
    "Tallowmill": "tallowmill.com",
    "Quarryline": "quarryline.co",
    "Bluepine Health": "bluepinehealth.org",
    "Saltmarsh Foods": "saltmarshfoods.com",
    "Copperleaf Logistics": "copperleaf-logistics.com",
    "Orchard Row Bank": "orchardrowbank.com",
    "Vantor Robotics": "vantorrobotics.com",
    "Greywater Media": "greywatermedia.net",
    "Hollis & Reed": "hollisreed.law",
    "Stonebridge Schools": "stonebridgeschools.org",
    "Marisol Hotels": "marisolhotels.com",
    "Pinecrest Energy": "pinecrestenergy.com",
    "Redkite Games": "redkitegames.io",
    "Alder Dental": "alderdental.com",
    "Eastgate Pharma": "eastgatepharma.com",
    "Brightfold Packaging": "brightfold.com",
    "Cobalt Freight": "cobaltfreight.com",
    "Wrenfield Studios": "wrenfield.studio",
}
CUSTOMER_FIRST = [
    "Wendell",
    "Priscilla",
    "Tobias",
    "Ines",
    "Rohan",
    "Maren",
    "Desmond",
    "Yusra",
    "Caleb",
    "Odette",
    "Bashir",
    "Lorena",
    "Anders",
    "Keiko",
    "Marcus",
    "Ottilie",
    "Ruben",
    "Signe",
    "Thaddeus",
    "Valeria",
    "Idris",
    "Paloma",
    "Gideon",
    "Ayesha",
    "Florian",
    "Nkechi",
    "Soren",
    "Beatrix",
    "Emeka",
    "Clementine",
    "Hugo",
    "Ilse",
]
CUSTOMER_LAST = [
    "Ashby",
    "Vance",
    "Engel",
    "Carvalho",
    "Mehta",
    "Lindgren",
    "Achterberg",
    "Farouk",
    "Whitlock",
    "Marchetti",
    "Osei",
    "Castellanos",
    "Bjork",
    "Yamada",
    "Delacroix",
    "Brandt",
    "Quintero",
    "Halvorsen",
    "Pryce",
    "Ortega",
    "Kamau",
    "Novak",
    "Sutherland",
    "Rashid",
    "Kessler",
    "Obi",
    "Lund",
    "Fairweather",
    "Nnamdi",
    "Duval",
]
STATUSES = ["Lead", "Qualified", "Proposal", "Won", "Lost"]
INTERESTS = ["Software", "Hardware", "Services", "Consulting", "Training"]
NOTES = {  # what a rep writes down at each stage
    "Lead": [
        "Intro call, asked for pricing.",
        "Met at the Lisbon data summit.",
        "Downloaded the pricing guide.",
    ],
    "Qualified": [
        "Demo went well, wants a second session.",
        "Asked about SSO and audit logs.",
        "Confirmed budget for next quarter.",
    ],
    "Proposal": [
        "Sent the pilot proposal.",
        "Waiting on their procurement team.",
        "Needs a security questionnaire answered.",
    ],
    "Won": ["Signed the order form.", "Kick-off call booked.", "Onboarding started with their admin."],
    "Lost": ["Chose a competitor on price.", "Budget frozen until January.", "Went quiet after the demo."],
}


PLANTED_CUSTOMERS = [  # (name, company, rep, status, interest, last contact, phone)
    ("Wendell Ashby", "Quarryline", "Nadia", "Qualified", "Software", "2025-10-30", "617-555-0142"),
    ("Tobias Engel", "Vantor Robotics", "Julien", "Proposal", "Hardware", "2025-11-06", ""),
    ("Priscilla Vance", "Marisol Hotels", "Sunita", "Won", "Services", "2025-11-03", "305-555-0118"),
    ("Ines Carvalho", "Bluepine Health", "Amara", "Lead", "Training", "2025-10-22", ""),
    ("Rohan Mehta", "Cobalt Freight", "Amara", "Lead", "Training", "2025-11-07", "773-555-0164"),
    ("Keiko Yamada", "Redkite Games", "Amara", "Qualified", "Training", "2025-09-30", ""),
    ("Ruben Quintero", "Alder Dental", "Amara", "Qualified", "Training", "2025-11-10", "512-555-0127"),
    ("Desmond Achterberg", "Pinecrest Energy", "Julien", "Lost", "Hardware", "2025-09-26", "406-555-0193"),
    ("Signe Halvorsen", "Brightfold Packaging", "Julien", "Lost", "Hardware", "2025-10-14", ""),
    ("Marcus Delacroix", "Hollis & Reed", "Oscar", "Proposal", "Services", "2025-10-02", "212-555-0150"),
    ("Odette Marchetti", "Orchard Row Bank", "Sunita", "Proposal", "Services", "2025-09-24", ""),
    ("Caleb Whitlock", "Greywater Media", "Nadia", "Proposal", "Services", "2025-11-03", "503-555-0171"),
    ("Yusra Farouk", "Eastgate Pharma", "Nadia", "Won", "Consulting", "2025-11-04", "617-555-0109"),
    ("Anders Bjork", "Stonebridge Schools", "Nadia", "Won", "Training", "2025-11-10", ""),
    ("Lorena Castellanos", "Saltmarsh Foods", "Nadia", "Won", "Software", "2025-10-12", "415-555-0133"),
]
TARGETED = [  # (rep, status, interest) combinations the tasks filter on: only planted rows have them
    ("Amara", "Lead", "Training"),
    ("Julien", "Lost", "Hardware"),
    (None, "Proposal", "Services"),
    ("Nadia", "Won", None),
]


def customers(rng: random.Random) -> list[Row]:
    rows = [
        customer(
            rng,
            name,
            COMPANIES[company],
            person(rep).email,
            status,
            interest,
            date.fromisoformat(last),
            phone,
        )
        for name, company, rep, status, interest, last, phone in PLANTED_CUSTOMERS
    ]
    names = {r["customer_name"] for r in rows}
    reps = team("sales")
    while len(rows) < 62:
        name = f"{rng.choice(CUSTOMER_FIRST)} {rng.choice(CUSTOMER_LAST)}"
        rep, status, interest = rng.choice(reps), rng.choice(STATUSES), rng.choice(INTERESTS)
        if name in names or any(
            (r in (None, rep.first)) and s == status and i in (None, interest) for r, s, i in TARGETED
        ):
            continue
        names.add(name)
        phone = "" if rng.random() < 0.3 else f"{rng.randrange(201, 989)}-555-01{rng.randrange(10, 99)}"
        rows.append(
            customer(
                rng,
                name,
                COMPANIES[rng.choice(list(COMPANIES))],
                rep.email,
                status,
                interest,
                TODAY - timedelta(days=rng.randrange(0, 60)),
                phone,
            )
        )
    rng.shuffle(rows)
    return rows


def customer(
    rng: random.Random, name: str, domain: str, rep: str, status: str, interest: str, last: date, phone: str
) -> Row:
    gaps = sorted(rng.sample(range(0, 40), rng.randrange(0, 3)), reverse=True)  # the last note is the stage's
    stages = ["Lead"] * (len(gaps) - 1) + [status] if gaps else []
    notes = " ".join(
        f"{(last - timedelta(days=gap)).isoformat()}: {rng.choice(NOTES[stage])}"
        for gap, stage in zip(gaps, stages, strict=True)
    )
    return {
        "assigned_to_email": rep,
        "customer_name": name,
        "customer_email": f"{name.lower().replace(' ', '.')}@{domain}",
        "customer_phone": phone,
        "last_contact_date": last.isoformat(),
        "product_interest": interest,
        "status": status,
        "follow_up_by": (last + timedelta(days=rng.randrange(7, 36))).isoformat(),
        "notes": notes,
    }


# ----- calendar -----------------------------------------------------------------------------------

MEETING_KINDS = [
    ("1:1 with {first}", None),
    ("Sprint planning", "Back end"),
    ("Design review", "Design"),
    ("Front end sync", "Front end"),
    ("Pipeline review", "sales"),
    ("Budget check-in", "finance"),
    ("Campaign sync", "marketing"),
    ("Roadmap sync", "product"),
    ("Hiring sync", "people"),
    ("Metrics walkthrough", "data"),
    ("Architecture review", "Back end"),
    ("Deal desk", "sales"),
]


def calendar_events(rng: random.Random) -> list[Row]:
    rows: list[Row] = []
    planted = [
        ("Vendor demo: Cloudnest", "Felix", "2025-11-14 09:30:00", 30),
        ("Pipeline review", "Nadia", "2025-11-14 11:00:00", 60),
        ("Design review", "Lucia", "2025-11-14 15:00:00", 60),
        ("Design review", "Lucia", "2025-11-17 13:00:00", 60),
        ("1:1 with Kenji", "Kenji", "2025-11-17 10:00:00", 30),
        ("Architecture review", "Kenji", "2025-11-19 15:30:00", 90),
        ("Hiring sync", "Hannah Brooks", "2025-11-19 14:00:00", 30),
        ("Front end sync", "Zara", "2025-11-20 11:00:00", 60),
        ("Roadmap sync", "Tomas", "2025-11-21 09:00:00", 60),
        ("Budget check-in", "Victor", "2025-11-21 10:00:00", 30),
        ("Deal desk", "Oscar", "2025-11-18 16:00:00", 60),
        ("Metrics walkthrough", "Hannah Kim", "2025-11-18 11:30:00", 60),
    ]
    for name, who, start, minutes in planted:
        rows.append(event(name, person(who).email, datetime.fromisoformat(start), minutes))
    day = date(2025, 10, 27)
    while day <= date(2025, 12, 5):
        if day.weekday() < 5 and day not in (date(2025, 11, 14), date(2025, 11, 21)):
            for _ in range(rng.randrange(1, 4)):
                add_random_event(rng, rows, day)
        day += timedelta(days=1)
    return rows


def event(name: str, email: str, start: datetime, minutes: int) -> Row:
    return {
        "event_name": name,
        "participant_email": email,
        "event_start": start.isoformat(" "),
        "duration": str(minutes),
    }


def add_random_event(rng: random.Random, rows: list[Row], day: date) -> None:
    name, team_name = rng.choice(MEETING_KINDS)
    who = rng.choice(PEOPLE if team_name is None else team(team_name))
    minutes = rng.choice([30, 30, 60, 60, 90])
    for _ in range(20):
        start = datetime.combine(day, datetime.min.time()) + timedelta(
            minutes=30 * rng.randrange(18, 36 - minutes // 30)
        )
        end = start + timedelta(minutes=minutes)
        if all(
            end <= s or start >= s + timedelta(minutes=int(r["duration"]))
            for r in rows
            for s in [datetime.fromisoformat(r["event_start"])]
        ):
            rows.append(event(name.format(first=who.first), who.email, start, minutes))
            return


# ----- analytics ----------------------------------------------------------------------------------

SOURCES = ["direct", "referral", "search engine", "social media"]


def analytics(rng: random.Random) -> list[Row]:
    rows = []
    day = date(2025, 9, 29)
    visitors = [v for v in (f"{rng.randrange(10_000):04d}" for _ in range(170)) if v != "4817"]
    while day <= TODAY:
        for _ in range(rng.randrange(1, 7) + (2 if day.weekday() < 5 else 0)):
            views = rng.choice([1, 1, 2, 2, 3, 3, 4, 5, 6, 8, 11])
            seconds = max(3, int(rng.gauss(25 + 35 * views, 40)))
            rows.append(
                {
                    "date_of_visit": day.isoformat(),
                    "visitor_id": rng.choice(visitors),
                    "page_views": str(views),
                    "session_duration_seconds": str(seconds),
                    "traffic_source": rng.choices(SOURCES, weights=[5, 2, 3, 3])[0],
                    "user_engaged": str(views >= 3 and seconds >= 90),
                }
            )
        day += timedelta(days=1)
    for visit_day, views, seconds, source in (
        ("2025-10-09", "7", "412", "search engine"),
        ("2025-11-04", "3", "95", "referral"),
    ):
        rows.append(
            {
                "date_of_visit": visit_day,
                "visitor_id": "4817",
                "page_views": views,
                "session_duration_seconds": seconds,
                "traffic_source": source,
                "user_engaged": "True",
            }
        )
    rows.sort(key=lambda r: r["date_of_visit"])
    return rows


# ----- email --------------------------------------------------------------------------------------


def nl(*lines: str) -> str:
    """A body with WorkBench's line breaks (a literal backslash-n in the CSV)."""
    return "\\n".join(lines)


STATUS_BODIES = [
    (
        "Progress on {task}",
        "Hi Morgan,|Quick update on '{task}': the main part is done and I'm writing tests now.|"
        "Should be ready for review by {due}.|Thanks,|{first}",
    ),
    (
        "Blocked: {task}",
        "Hi Morgan,|I'm stuck on '{task}' until we get access to the staging credentials.|"
        "Could you nudge the platform team?|Cheers,|{first}",
    ),
    (
        "Ready for review: {task}",
        "Morgan,|'{task}' is ready for review. I left notes on the two trade-offs I "
        "wasn't sure about.|Best,|{first}",
    ),
    (
        "Question about {task}",
        "Hi Morgan,|Before I go further on '{task}', do we still want it for the December "
        "release, or can it slip?|Thanks,|{first}",
    ),
]
TEAM_NOTES = {
    "sales": [
        (
            "Pipeline notes for this week",
            "Hi Morgan,|Two deals moved to proposal and one went quiet. Details are in the CRM.|{first}",
        ),
        (
            "Discount request from {company}",
            "Morgan,|{company} asked for 12% off a two-year term. "
            "I think 8% is where we should land. Thoughts?|{first}",
        ),
    ],
    "marketing": [
        (
            "Campaign calendar for December",
            "Hi Morgan,|Attached the December campaign calendar. The webinar moved to the 11th.|{first}",
        ),
        ("Website copy review", "Morgan,|Could you skim the new homepage copy before Friday?|{first}"),
    ],
    "finance": [
        ("Expense reports due", "Hi all,|Reminder that October expense reports are due by the 15th.|{first}")
    ],
    "people": [
        (
            "Open enrollment closes soon",
            "Hi Morgan,|Benefits open enrollment closes on 2025-11-28. "
            "Please confirm your selections in the portal.|{first}",
        )
    ],
    "data": [
        (
            "Churn dashboard refresh",
            "Morgan,|The churn dashboard now refreshes hourly instead of daily.|{first}",
        )
    ],
    "product": [
        (
            "Beta feedback themes",
            "Hi Morgan,|The top three themes from beta feedback are exports, permissions and speed.|{first}",
        )
    ],
    "engineering": [
        (
            "Engineering offsite agenda",
            "Morgan,|Draft agenda for the engineering offsite is in the "
            "shared drive. Comments welcome.|{first}",
        )
    ],
}
NEWSLETTERS = [
    (
        "digest@parcelgrid.com",
        "Parcelgrid Weekly: shipping APIs roundup",
        "This week: label printing at scale, customs data, and a new sandbox for carriers.",
    ),
    (
        "events@northloop.org",
        "Northloop meetup: data teams in practice",
        "Join us for talks on dbt, observability and on-call for analysts.",
    ),
]


def emails(rng: random.Random, tasks: list[Row]) -> list[Row]:
    rows: list[Row] = []

    def add(box: str, who: str, subject: str, when: str, body: str) -> None:
        rows.append(
            {
                "inbox/outbox": box,
                "sender/recipient": who,
                "subject": subject,
                "sent_datetime": when,
                "body": body,
            }
        )

    def stamp(day: date) -> str:
        return f"{day.isoformat()} {rng.randrange(8, 19):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}"

    start = date(2025, 9, 15)
    for _ in range(40):  # status notes on project tasks
        task = rng.choice(tasks)
        owner = next(p for p in PEOPLE if p.email == task["assigned_to_email"])
        subject, body = rng.choice(STATUS_BODIES)
        text = body.format(task=task["task_name"], due=task["due_date"], first=owner.first)
        add(
            "inbox",
            owner.email,
            subject.format(task=task["task_name"]),
            stamp(start + timedelta(days=rng.randrange(58))),
            nl(*text.split("|")),
        )
    for _ in range(18):  # team notes
        sender = rng.choice([p for p in PEOPLE if p.team in TEAM_NOTES])
        subject, body = rng.choice(TEAM_NOTES[sender.team])
        company = rng.choice(list(COMPANIES))
        add(
            "inbox",
            sender.email,
            subject.format(company=company),
            stamp(start + timedelta(days=rng.randrange(58))),
            nl(*body.format(first=sender.first, company=company).split("|")),
        )
    for sender, subject, body in NEWSLETTERS:
        for day in (
            ("2025-10-03", "2025-10-17", "2025-10-31", "2025-11-07")
            if "parcelgrid" in sender
            else ("2025-10-08", "2025-11-05")
        ):
            add("inbox", sender, subject, f"{day} 07:00:00", body)
    for _ in range(8):  # what Morgan sent
        to = rng.choice(PEOPLE)
        add(
            "outbox",
            to.email,
            "Quick question",
            stamp(start + timedelta(days=rng.randrange(58))),
            nl(f"Hi {to.first},", "Do you have ten minutes tomorrow to go over the plan?", USER),
        )
    planted_emails(add)
    rows.sort(key=lambda r: r["sent_datetime"])
    return rows


def planted_emails(add: Any) -> None:
    d, v, o, hb, n, s, e = (
        person(x).email for x in ("Dmitri", "Victor", "Oscar", "Hannah Brooks", "Noor", "Samuel", "Ethan")
    )
    add(
        "inbox",
        d,
        "Redis migration plan",
        "2025-10-21 10:12:40",
        nl(
            "Hi Morgan,",
            "Sharing the plan for moving the job queue to managed Redis. Cut-over is a weekend job.",
            "Dmitri",
        ),
    )
    add(
        "inbox",
        d,
        "Redis migration: dry run results",
        "2025-11-06 16:45:03",
        nl(
            "Morgan,",
            "The dry run of the Redis migration finished in 40 minutes with no lost jobs.",
            "Dmitri",
        ),
    )
    add(
        "inbox",
        d,
        "Redis migration: cut-over date",
        "2025-11-12 09:05:51",
        nl(
            "Hi Morgan,",
            "Can we do the Redis migration cut-over on Saturday the 22nd? I need your sign-off.",
            "Dmitri",
        ),
    )
    add(
        "inbox",
        v,
        "Q4 budget draft",
        "2025-10-28 14:20:00",
        nl(
            "Morgan,", "First draft of the Q4 budget is in the finance folder. Travel is over plan.", "Victor"
        ),
    )
    add(
        "inbox",
        v,
        "Q4 budget draft v2",
        "2025-11-10 11:02:37",
        nl("Morgan,", "Second draft of the Q4 budget: travel trimmed by 15%, tooling unchanged.", "Victor"),
    )
    add(
        "inbox",
        o,
        "Tallowmill renewal",
        "2025-10-20 13:31:09",
        nl("Hi Morgan,", "Tallowmill wants to renew early if we include the training package.", "Oscar"),
    )
    add(
        "inbox",
        o,
        "Tallowmill security review",
        "2025-11-11 15:48:22",
        nl(
            "Morgan,",
            "Tallowmill sent their security questionnaire. I'll need help on the encryption section.",
            "Oscar",
        ),
    )
    add(
        "inbox",
        o,
        "Tallowmill order form",
        "2025-11-12 17:26:45",
        nl("Morgan,", "Tallowmill signed the order form for 40 seats. Kick-off next week.", "Oscar"),
    )
    add(
        "inbox",
        o,
        "New lead from the expo",
        "2025-11-13 09:41:18",
        nl(
            "Hi Morgan,",
            "Please add Lior Bendavid (lior.bendavid@saltmarshfoods.com) to the CRM as a Lead "
            "assigned to me, interested in Consulting. No phone number yet.",
            "Thanks,",
            "Oscar",
        ),
    )
    add(
        "inbox",
        hb,
        "Benefits info session",
        "2025-11-12 12:15:30",
        nl(
            "Hi Morgan,",
            "Could you put the benefits info session on your calendar with me? Please call it "
            "'Benefits info session', on 2025-11-25 at 11:00, for 45 minutes.",
            "Hannah",
        ),
    )
    add(
        "inbox",
        hb,
        "Parking garage closure",
        "2025-11-05 08:30:12",
        nl("Hi all,", "The parking garage on Alder Street is closed for repairs until 2025-11-20.", "Hannah"),
    )
    add(
        "inbox",
        n,
        "Logo files for the partner page",
        "2025-11-10 10:44:56",
        nl(
            "Hi Morgan,",
            "The partner page logos are in the design drive, in SVG and PNG. OK to publish?",
            "Noor",
        ),
    )
    add(
        "inbox",
        s,
        "Database migration window",
        "2025-11-11 18:03:27",
        nl(
            "Morgan,",
            "The Postgres 16 database migration needs a two-hour window. I suggest Sunday morning.",
            "Samuel",
        ),
    )
    add(
        "inbox",
        e,
        "Draft blog post: migration stories",
        "2025-11-07 14:09:33",
        nl(
            "Hi Morgan,",
            "The draft of the migration stories post is ready. Hannah Kim offered to review the "
            "numbers before we publish, could you send it to her?",
            "Ethan",
        ),
    )


# ----- writing ------------------------------------------------------------------------------------

COLUMNS = {
    "emails.csv": ["email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body"],
    "calendar_events.csv": ["event_id", "event_name", "participant_email", "event_start", "duration"],
    "analytics_data.csv": [
        "date_of_visit",
        "visitor_id",
        "page_views",
        "session_duration_seconds",
        "traffic_source",
        "user_engaged",
    ],
    "project_tasks.csv": ["task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board"],
    "customer_relationship_manager_data.csv": [
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
    ],
}
ID_COLUMN = {
    "emails.csv": "email_id",
    "calendar_events.csv": "event_id",
    "project_tasks.csv": "task_id",
    "customer_relationship_manager_data.csv": "customer_id",
}


def assign_ids(rng: random.Random, rows: list[Row], column: str) -> None:
    """8-digit ids in shuffled order, as in WorkBench: an id says nothing about a row's date."""
    ids = rng.sample(range(len(rows)), len(rows))
    for row, number in zip(rows, ids, strict=True):
        row[column] = f"{number:08d}"


def build() -> dict[str, list[Row]]:
    """Every table, ids assigned (the directory is the list of addresses)."""
    rng = random.Random(SEED)
    tasks, crm = project_tasks(rng), customers(rng)
    tables = {
        "project_tasks.csv": tasks,
        "customer_relationship_manager_data.csv": crm,
        "calendar_events.csv": calendar_events(rng),
        "analytics_data.csv": analytics(rng),
    }
    tables["emails.csv"] = emails(rng, tasks)
    for name, column in ID_COLUMN.items():
        assign_ids(rng, tables[name], column)
    tables["calendar_events.csv"].sort(key=lambda r: r["event_start"])
    return tables


def write(tables: dict[str, list[Row]]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, columns in COLUMNS.items():
        with (OUT / name).open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
            writer.writeheader()
            writer.writerows(tables[name])
    directory = sorted([p.email for p in PEOPLE] + [f"{USER.lower()}.ellis@{DOMAIN}"])
    (OUT / "email_addresses.csv").write_text(
        "".join(f"{address}\n" for address in directory), encoding="utf-8"
    )


if __name__ == "__main__":
    write(build())
