"""Write the workplace env's bundled tables and tasks (``envs/workplace/data/``).

Each task is a request in plain words plus the call sequence a good agent makes (``solution``:
reads and writes); ``ground_truth`` is its state-changing calls. A request that asks a question
also carries ``expected_answer`` (what the final reply must state) and ``distractors`` (the
answers of neighbouring questions on the same data, which a reply must not state: another
source's count, another day, another person), as ``envs/workplace/answer.py`` reads them; a
distractor is never a value the solution's own reads show, which a good reply may quote.
Targets and answers (ids, addresses, counts, free slots, names) are computed here from the
generated tables, never typed in, so the rows and the tasks cannot drift apart. Rows follow the
public NeMo Gym ``workplace_assistant`` layout, minus ``tools`` (the env announces its own).

    python bench/data/make_workplace_tasks.py
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from make_workplace_tables import LISTS, NOW, OUT, PEOPLE, SOURCES, TODAY, Person, Row, build, person, write

TASKS_FILE = OUT.parent / "tasks.jsonl"
SYSTEM_PROMPT = (
    f"Today's date is {TODAY.strftime('%A')}, {TODAY.isoformat()} and the current time is {NOW[11:]}. "
    "Remember the current date and time when answering queries. Meetings must not start before 9am or end after 6pm."
)
WRITES = {
    "email_send_email",
    "email_delete_email",
    "email_forward_email",
    "email_reply_email",
    "calendar_create_event",
    "calendar_delete_event",
    "calendar_update_event",
    "analytics_create_plot",
    "project_management_create_task",
    "project_management_delete_task",
    "project_management_update_task",
    "customer_relationship_manager_add_customer",
    "customer_relationship_manager_update_customer",
    "customer_relationship_manager_delete_customer",
}
MAX_TURNS = 6
"""The env's default turn limit (NeMo Gym's max_steps for workplace_assistant)."""
TOMORROW = TODAY + timedelta(days=1)
NEXT_MONDAY = TODAY + timedelta(days=7 - TODAY.weekday())
THIS_MONDAY = TODAY - timedelta(days=TODAY.weekday())

Call = dict[str, Any]
Answer = dict[str, Any]
"""A question's ``expected_answer`` and ``distractors``."""


def call(tool: str, /, **arguments: Any) -> Call:
    return {"name": tool, "arguments": arguments}


def lookup(first: str) -> Call:
    return call("company_directory_find_email_address", name=first.lower())


def days(start: str, end: str) -> list[str]:
    first, last = date.fromisoformat(start), date.fromisoformat(end)
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def day_bounds(day: date) -> dict[str, str]:
    return {"time_min": f"{day.isoformat()} 00:00:00", "time_max": f"{day.isoformat()} 23:59:59"}


def asks(
    expected: str | list[str | list[str]], distractors: Iterable[Any] = (), *, shown: Iterable[Any] = ()
) -> Answer:
    """A question's answer fields; distractors equal to an expected item or to a value the solution's
    reads show (``shown``: a good reply may quote them) are left out."""
    listed = [expected] if isinstance(expected, str) else expected
    kept = {str(x) for item in listed for x in ([item] if isinstance(item, str) else item)} | {
        str(x) for x in shown
    }
    wrong = [d for d in dict.fromkeys(str(d) for d in distractors) if d not in kept]
    return {"expected_answer": expected, **({"distractors": wrong} if wrong else {})}


def how_many(count: int, noun: str) -> str | list[str]:
    """A count as a reply may state it; none at all also as words ("none", "no tasks", "doesn't have any")."""
    if count:
        return str(count)
    return ["0", "zero", "none", f"no {noun}", "not have any", "doesn't have any"]


def full_name(who: Person) -> str:
    return f"{who.first} {who.last}"


def who(one: Person) -> list[str]:
    """A person as a reply may name them: the address or the full name."""
    return [one.email, full_name(one)]


def everyone_but(*named: Person) -> list[str]:
    """The directory's other people (address and full name), the wrong answers to a "who" question."""
    return [x for p in PEOPLE if p not in named for x in who(p)]


class Tables:
    """Read helpers over the generated tables (plain filters; the tests check them against the tools)."""

    def __init__(self, tables: dict[str, list[Row]]):
        self.emails = tables["emails.csv"]
        self.events = tables["calendar_events.csv"]
        self.visits = tables["analytics_data.csv"]
        self.tasks = tables["project_tasks.csv"]
        self.customers = tables["customer_relationship_manager_data.csv"]

    def latest_email(self, sender: str, *words: str, since: str = "") -> Row:
        return self.emails_matching(sender, *words, since=since)[0]

    def emails_matching(self, sender: str, *words: str, since: str = "", until: str = "9999") -> list[Row]:
        found = [
            e
            for e in self.emails
            if e["sender/recipient"] == sender
            and since <= e["sent_datetime"][:10] <= until
            and all(w.lower() in f"{e['subject']} {e['body']}".lower() for w in words)
        ]
        return sorted(found, key=lambda e: e["sent_datetime"], reverse=True)

    def events_on(self, day: date, name: str = "", who: str = "") -> list[Row]:
        return sorted(
            (
                e
                for e in self.events
                if e["event_start"][:10] == day.isoformat()
                and name in e["event_name"]
                and who in e["participant_email"]
            ),
            key=lambda e: e["event_start"],
        )

    def visit_count(self, start: str, end: str, source: str = "", engaged: bool = False) -> int:
        return sum(
            1
            for v in self.visits
            if start <= v["date_of_visit"] <= end
            and (not source or v["traffic_source"] == source)
            and (not engaged or v["user_engaged"] == "True")
        )

    def daily_counts(self, start: str, end: str, source: str) -> list[int]:
        """A source's visits on each day from ``start`` to ``end`` (what ``analytics_traffic_source_count`` shows)."""
        return [self.visit_count(day, day, source) for day in days(start, end)]

    def average_duration(self, day: str) -> float:
        seconds = [int(v["session_duration_seconds"]) for v in self.visits if v["date_of_visit"] == day]
        return sum(seconds) / len(seconds)

    def project_tasks(self, **fields: str) -> list[Row]:
        return [t for t in self.tasks if all(t[k] == v for k, v in fields.items())]

    def task_named(self, name: str) -> Row:
        (task,) = self.project_tasks(task_name=name)
        return task

    def customers_where(self, test: Callable[[Row], bool]) -> list[Row]:
        return [c for c in self.customers if test(c)]

    def customer_named(self, name: str) -> Row:
        (found,) = self.customers_where(lambda c: c["customer_name"] == name)
        return found

    def first_free_start(self, day: date, minutes: int) -> datetime:
        """The earliest start from 9:00 on ``day``, on the half hour, that overlaps no event."""
        busy = [
            (
                datetime.fromisoformat(e["event_start"]),
                datetime.fromisoformat(e["event_start"]) + timedelta(minutes=int(e["duration"])),
            )
            for e in self.events_on(day)
        ]
        start = datetime.combine(day, datetime.min.time()) + timedelta(hours=9)
        while any(start < end and start + timedelta(minutes=minutes) > begin for begin, end in busy):
            start += timedelta(minutes=30)
        assert start + timedelta(minutes=minutes) <= datetime.combine(day, datetime.min.time()) + timedelta(
            hours=18
        )
        return start


# ----- the tasks, one function per data set -------------------------------------------------------

Spec = (
    tuple[str, str, list[Call]] | tuple[str, str, list[Call], Answer]
)  # category, request, solution[, answer]


def email_tasks(t: Tables) -> list[Spec]:
    dmitri, victor, oscar, noor = (person(x).email for x in ("Dmitri", "Victor", "Oscar", "Noor"))
    grace, nadia, tomas, ethan = (person(x).email for x in ("Grace", "Nadia", "Tomas", "Ethan"))
    hannah_kim, samuel, meiling = person("Hannah Kim").email, person("Samuel").email, person("Meiling").email
    assert t.emails_matching(meiling)
    redis = t.latest_email(dmitri, "redis")
    budget = t.latest_email(victor, "q4 budget draft")
    parcelgrid = [
        e for e in t.emails if "parcelgrid" in e["sender/recipient"] and e["sent_datetime"][:7] == "2025-10"
    ]
    blog = t.latest_email(ethan, "migration stories")
    logos = t.latest_email(noor, "partner page")
    tallowmill = t.emails_matching(oscar, "tallowmill", since=THIS_MONDAY.isoformat())
    parking = t.latest_email(person("Hannah Brooks").email, "parking garage")
    latest_victor = t.latest_email(victor)
    from_meiling = t.emails_matching(meiling)
    (migration,) = t.emails_matching(samuel, "database migration", since=THIS_MONDAY.isoformat())
    migration_day = date.fromisoformat(migration["sent_datetime"][:10])
    (redis_sender,) = [p for p in PEOPLE if p.email == redis["sender/recipient"]]
    c = "workplace_assistant_email"
    return [
        (
            c,
            "Reply to Dmitri's latest email about the Redis migration with 'Saturday the 22nd works, you have my "
            "sign-off.'",
            [
                call("email_search_emails", query="redis dmitri"),
                call(
                    "email_reply_email",
                    email_id=redis["email_id"],
                    body="Saturday the 22nd works, you have my sign-off.",
                ),
            ],
        ),
        (
            c,
            "Forward the most recent Q4 budget draft from Victor to Grace.",
            [
                call("email_search_emails", query="Q4 budget draft"),
                lookup("Grace"),
                call("email_forward_email", email_id=budget["email_id"], recipient=grace),
            ],
        ),
        (
            c,
            "Send Tomas an email with the subject 'Beta feedback summary' and the body 'Thanks for the themes. "
            "Let's turn exports and permissions into epics for Q1.'",
            [
                lookup("Tomas"),
                call(
                    "email_send_email",
                    recipient=tomas,
                    subject="Beta feedback summary",
                    body="Thanks for the themes. Let's turn exports and permissions into epics for Q1.",
                ),
            ],
        ),
        (
            c,
            "Delete the Parcelgrid newsletters I received in October.",
            [
                call("email_search_emails", query="parcelgrid", date_min="2025-10-01", date_max="2025-10-31"),
                *(call("email_delete_email", email_id=e["email_id"]) for e in parcelgrid),
            ],
        ),
        (
            c,
            f"Read email {blog['email_id']} and forward it to the colleague it says will review it.",
            [
                call("email_get_email_information_by_id", email_id=blog["email_id"], field="body"),
                lookup("Hannah"),
                call("email_forward_email", email_id=blog["email_id"], recipient=hannah_kim),
            ],
        ),
        (
            c,
            "What was the subject of the last email Meiling sent me?",
            [lookup("Meiling"), call("email_search_emails", query=meiling)],
            asks(from_meiling[0]["subject"], [e["subject"] for e in from_meiling[1:]]),
        ),
        (
            c,
            "Reply to Noor's email about the partner page logos with 'Looks great, approved for publishing.'",
            [
                call("email_search_emails", query="partner page logos"),
                call(
                    "email_reply_email",
                    email_id=logos["email_id"],
                    body="Looks great, approved for publishing.",
                ),
            ],
        ),
        (
            c,
            "Forward every email Oscar sent me this week about Tallowmill to Nadia.",
            [
                call("email_search_emails", query="tallowmill oscar", date_min=THIS_MONDAY.isoformat()),
                lookup("Nadia"),
                *(call("email_forward_email", email_id=e["email_id"], recipient=nadia) for e in tallowmill),
            ],
        ),
        (
            c,
            "Delete the email about the parking garage closure.",
            [
                call("email_search_emails", query="parking garage"),
                call("email_delete_email", email_id=parking["email_id"]),
            ],
        ),
        (
            c,
            "Email Ethan and Grace with the subject 'Webinar date' and the body 'The December webinar is confirmed "
            "for the 11th.'",
            [
                lookup("Ethan"),
                lookup("Grace"),
                *(
                    call(
                        "email_send_email",
                        recipient=to,
                        subject="Webinar date",
                        body="The December webinar is confirmed for the 11th.",
                    )
                    for to in (ethan, grace)
                ),
            ],
        ),
        (
            c,
            "Has Samuel emailed me about the database migration since Monday? If so, when, and with what subject?",
            [
                call(
                    "email_search_emails", query="database migration samuel", date_min=THIS_MONDAY.isoformat()
                )
            ],
            asks(
                [[migration_day.isoformat(), migration_day.strftime("%A")], migration["subject"]],
                [e["subject"] for e in t.emails_matching(samuel) if e is not migration],
            ),
        ),
        (c, "Send an email to Bartholomew saying 'See you at the offsite.'", [lookup("Bartholomew")]),
        (
            c,
            "Reply to the latest email from Victor with 'Thanks Victor, approved.'",
            [
                call("email_search_emails", query=victor),
                call(
                    "email_reply_email", email_id=latest_victor["email_id"], body="Thanks Victor, approved."
                ),
            ],
        ),
        (
            c,
            f"Who sent email {redis['email_id']}? Forward it to Samuel too.",
            [
                call(
                    "email_get_email_information_by_id", email_id=redis["email_id"], field="sender/recipient"
                ),
                lookup("Samuel"),
                call("email_forward_email", email_id=redis["email_id"], recipient=samuel),
            ],
            asks([who(redis_sender)], everyone_but(redis_sender, person("Samuel"))),
        ),
    ]


def calendar_tasks(t: Tables) -> list[Spec]:
    kenji, sunita, tomas = (person(x).email for x in ("Kenji", "Sunita", "Tomas"))
    last_on_18 = t.events_on(date(2025, 11, 18))[-1]
    next_week = {
        "time_min": f"{NEXT_MONDAY} 00:00:00",
        "time_max": f"{NEXT_MONDAY + timedelta(days=4)} 23:59:59",
    }
    kenji_next_week = [
        e
        for e in t.events
        if e["participant_email"] == kenji
        and next_week["time_min"] <= e["event_start"] <= next_week["time_max"]
    ]
    (design_review,) = t.events_on(NEXT_MONDAY, "Design review")
    (demo,) = t.events_on(TOMORROW, "Vendor demo")
    (at_two,) = [e for e in t.events_on(date(2025, 11, 19)) if e["event_start"].endswith("14:00:00")]
    (meeting,) = [p for p in PEOPLE if p.email == at_two["participant_email"]]
    friday = date(2025, 11, 21)
    free = t.first_free_start(friday, 60)
    (zara_sync,) = t.events_on(date(2025, 11, 20), "Front end sync", "zara")
    (budget,) = t.events_on(friday, "Budget check-in")
    c = "workplace_assistant_calendar"
    return [
        (
            c,
            "Change the name of the last event on November 18 to 'Partner onboarding review'.",
            [
                call("calendar_search_events", **day_bounds(date(2025, 11, 18))),
                call(
                    "calendar_update_event",
                    event_id=last_on_18["event_id"],
                    field="event_name",
                    new_value="Partner onboarding review",
                ),
            ],
        ),
        (
            c,
            "Cancel all my meetings with Kenji next week.",
            [
                lookup("Kenji"),
                call("calendar_search_events", query=kenji, **next_week),
                *(call("calendar_delete_event", event_id=e["event_id"]) for e in kenji_next_week),
            ],
        ),
        (
            c,
            "Schedule a 30-minute meeting called 'Quota planning' with Sunita tomorrow at 10am.",
            [
                lookup("Sunita"),
                call(
                    "calendar_create_event",
                    event_name="Quota planning",
                    participant_email=sunita,
                    event_start=f"{TOMORROW} 10:00:00",
                    duration="30",
                ),
            ],
        ),
        (c, "Book a 90-minute 'Contract walkthrough' with Julien tomorrow at 5pm.", [lookup("Julien")]),
        (
            c,
            "Push Monday's design review with Lucia back by 30 minutes.",
            [
                call("calendar_search_events", query="Design review", **day_bounds(NEXT_MONDAY)),
                call(
                    "calendar_update_event",
                    event_id=design_review["event_id"],
                    field="event_start",
                    new_value=shifted(design_review["event_start"], 30),
                ),
            ],
        ),
        (
            c,
            f"Make event {demo['event_id']} last 60 minutes.",
            [
                call("calendar_get_event_information_by_id", event_id=demo["event_id"], field="duration"),
                call("calendar_update_event", event_id=demo["event_id"], field="duration", new_value="60"),
            ],
        ),
        (
            c,
            "Who am I meeting at 2pm on Wednesday the 19th?",
            [
                call(
                    "calendar_search_events", time_min="2025-11-19 14:00:00", time_max="2025-11-19 14:00:00"
                ),
                call(
                    "calendar_get_event_information_by_id",
                    event_id=at_two["event_id"],
                    field="participant_email",
                ),
            ],
            asks([who(meeting)], everyone_but(meeting)),
        ),
        (
            c,
            "Set up a one-hour 'Roadmap deep dive' with Tomas on Friday the 21st at the earliest time I'm free.",
            [
                lookup("Tomas"),
                call("calendar_search_events", **day_bounds(friday)),
                call(
                    "calendar_create_event",
                    event_name="Roadmap deep dive",
                    participant_email=tomas,
                    event_start=free.isoformat(" "),
                    duration="60",
                ),
            ],
        ),
        (
            c,
            "Move my front end sync with Zara on Thursday the 20th to the same time on Friday.",
            [
                call("calendar_search_events", query="Front end sync", **day_bounds(date(2025, 11, 20))),
                call(
                    "calendar_update_event",
                    event_id=zara_sync["event_id"],
                    field="event_start",
                    new_value=shifted(zara_sync["event_start"], 24 * 60),
                ),
            ],
        ),
        (
            c,
            "Cancel the budget check-in with Victor on the 21st.",
            [
                call("calendar_search_events", query="Budget check-in", **day_bounds(friday)),
                call("calendar_delete_event", event_id=budget["event_id"]),
            ],
        ),
    ]


def shifted(start: str, minutes: int) -> str:
    return (datetime.fromisoformat(start) + timedelta(minutes=minutes)).isoformat(" ")


def analytics_tasks(t: Tables) -> list[Spec]:
    week = ("2025-11-03", "2025-11-09")
    engaged = t.visit_count(*week, engaged=True)
    search, referral = (
        t.visit_count("2025-10-01", "2025-10-31", "search engine"),
        t.visit_count("2025-10-01", "2025-10-31", "referral"),
    )
    assert search != referral
    higher = "visits_search_engine" if search > referral else "visits_referral"
    since = ("2025-11-01", TODAY.isoformat())
    search_nov, social_nov = t.visit_count(*since, "search engine"), t.visit_count(*since, "social media")
    assert search_nov != social_nov
    others = [s for s in SOURCES if s != "social media"]
    social_week = asks(
        str(t.visit_count(*week, "social media")),
        [
            *(t.visit_count(*week, s) for s in others),
            t.visit_count(*week),
            t.visit_count("2025-10-27", "2025-11-02", "social media"),
            t.visit_count("2025-11-10", TODAY.isoformat(), "social media"),
        ],
        shown=t.daily_counts(*week, "social media"),
    )
    (october_visit,) = [
        v for v in t.visits if v["visitor_id"] == "4817" and v["date_of_visit"][:7] == "2025-10"
    ]
    seconds = int(october_visit["session_duration_seconds"])
    assert all(
        seconds > t.average_duration(day) for day in days("2025-10-01", "2025-10-31")
    )  # longer, however read
    other_visits = [
        v["session_duration_seconds"]
        for v in t.visits
        if v["visitor_id"] == "4817" and v is not october_visit
    ]
    averages = {day: t.average_duration(day) for day in days(*since)}
    longest = max(averages, key=lambda day: averages[day])
    assert sorted(averages.values())[-2] < averages[longest]
    both_sources = asks(
        [str(search_nov), str(social_nov)],
        [t.visit_count(*since, s) for s in ("direct", "referral")],
        shown=[*t.daily_counts(*since, "search engine"), *t.daily_counts(*since, "social media")],
    )
    c = "workplace_assistant_analytics"
    plot = "analytics_create_plot"
    return [
        (
            c,
            "Create a bar chart of total visits from October 1 to October 31.",
            [
                call(
                    plot,
                    time_min="2025-10-01",
                    time_max="2025-10-31",
                    value_to_plot="total_visits",
                    plot_type="bar",
                )
            ],
        ),
        (
            c,
            "How many visits came from social media last week?",
            [
                call(
                    "analytics_traffic_source_count",
                    time_min=week[0],
                    time_max=week[1],
                    traffic_source="social media",
                )
            ],
            social_week,
        ),
        (
            c,
            "Plot the average session duration as a line chart between 2025-10-13 and 2025-11-09.",
            [
                call(
                    plot,
                    time_min="2025-10-13",
                    time_max="2025-11-09",
                    value_to_plot="session_duration_seconds",
                    plot_type="line",
                )
            ],
        ),
        (
            c,
            f"If more than {engaged + 3} users were engaged between November 3 and November 9, make a histogram of "
            "engaged users for those days; otherwise make a line chart of total visits for the same days.",
            [
                call("analytics_engaged_users_count", time_min=week[0], time_max=week[1]),
                call(
                    plot, time_min=week[0], time_max=week[1], value_to_plot="total_visits", plot_type="line"
                ),
            ],
        ),
        (
            c,
            "Look up visitor 4817's visit in October: how long was the session, and was it longer or shorter than the "
            "average session that month?",
            [
                call("analytics_get_visitor_information_by_id", visitor_id="4817"),
                call("analytics_get_average_session_duration", time_min="2025-10-01", time_max="2025-10-31"),
            ],
            asks([str(seconds), "longer"], ["shorter", *other_visits]),
        ),
        (
            c,
            "Compare search engine and referral visits in October, then make a scatter plot of whichever source "
            "brought more visits, for October.",
            [
                call(
                    "analytics_traffic_source_count",
                    time_min="2025-10-01",
                    time_max="2025-10-31",
                    traffic_source="search engine",
                ),
                call(
                    "analytics_traffic_source_count",
                    time_min="2025-10-01",
                    time_max="2025-10-31",
                    traffic_source="referral",
                ),
                call(
                    plot,
                    time_min="2025-10-01",
                    time_max="2025-10-31",
                    value_to_plot=higher,
                    plot_type="scatter",
                ),
            ],
        ),
        (
            c,
            "Make both a bar chart and a line chart of direct visits from 2025-10-31 to 2025-11-13.",
            [
                call(
                    plot,
                    time_min="2025-10-31",
                    time_max="2025-11-13",
                    value_to_plot="visits_direct",
                    plot_type=kind,
                )
                for kind in ("bar", "line")
            ],
        ),
        (
            c,
            "Which day this month so far had the longest average session duration?",
            [call("analytics_get_average_session_duration", time_min=since[0], time_max=since[1])],
            asks(longest, [day for day in averages if day != longest]),
        ),
        (
            c,
            "How many visits came from search engines and how many from social media since November 1? If search "
            "engines brought more, plot search engine visits since November 1 as a bar chart; if not, don't plot "
            "anything.",
            [
                call(
                    "analytics_traffic_source_count",
                    time_min=since[0],
                    time_max=since[1],
                    traffic_source="search engine",
                ),
                call(
                    "analytics_traffic_source_count",
                    time_min=since[0],
                    time_max=since[1],
                    traffic_source="social media",
                ),
                *(
                    [
                        call(
                            plot,
                            time_min=since[0],
                            time_max=since[1],
                            value_to_plot="visits_search_engine",
                            plot_type="bar",
                        )
                    ]
                    if search_nov > social_nov
                    else []
                ),
            ],
            both_sources,
        ),
    ]


def project_tasks(t: Tables) -> list[Spec]:
    ingrid, felix, samuel, kenji, zara, mateo = (
        person(x).email for x in ("Ingrid", "Felix", "Samuel", "Kenji", "Zara", "Mateo")
    )
    in_review = t.project_tasks(assigned_to_email=ingrid, list_name="In Review", board="Front end")
    meiling = person("Meiling").email
    done_design = t.project_tasks(assigned_to_email=meiling, list_name="Completed", board="Design")
    backlog = t.project_tasks(assigned_to_email=samuel, list_name="Backlog", board="Back end")
    runbook = t.task_named("Write runbook for failover drill")
    flags = t.task_named("Set up feature flag service")
    empty = t.task_named("Empty-state illustrations")
    colors = t.task_named("Chart color scheme for dark mode")
    c = "workplace_assistant_project_management"
    update = "project_management_update_task"
    return [
        (
            c,
            "Move all of Ingrid's front end tasks that are in review to Completed.",
            [
                lookup("Ingrid"),
                call(
                    "project_management_search_tasks",
                    assigned_to_email=ingrid,
                    list_name="In Review",
                    board="Front end",
                ),
                *(
                    call(update, task_id=x["task_id"], field="list_name", new_value="Completed")
                    for x in in_review
                ),
            ],
        ),
        (
            c,
            "Create a back end task 'Rotate API signing keys' in the backlog for Felix, due 2025-11-28.",
            [
                lookup("Felix"),
                call(
                    "project_management_create_task",
                    task_name="Rotate API signing keys",
                    assigned_to_email=felix,
                    list_name="Backlog",
                    due_date="2025-11-28",
                    board="Back end",
                ),
            ],
        ),
        (
            c,
            "Delete all of Meiling's completed tasks on the design board.",
            [
                lookup("Meiling"),
                call(
                    "project_management_search_tasks",
                    assigned_to_email=meiling,
                    list_name="Completed",
                    board="Design",
                ),
                *(call("project_management_delete_task", task_id=x["task_id"]) for x in done_design),
            ],
        ),
        (
            c,
            "Reassign all of Samuel's back end tasks in the backlog to Kenji.",
            [
                lookup("Samuel"),
                lookup("Kenji"),
                call(
                    "project_management_search_tasks",
                    assigned_to_email=samuel,
                    list_name="Backlog",
                    board="Back end",
                ),
                *(
                    call(update, task_id=x["task_id"], field="assigned_to_email", new_value=kenji)
                    for x in backlog
                ),
            ],
        ),
        (
            c,
            f"Check who is assigned to task {runbook['task_id']} and push its due date to 2025-11-26.",
            [
                call(
                    "project_management_get_task_information_by_id",
                    task_id=runbook["task_id"],
                    field="assigned_to_email",
                ),
                call(update, task_id=runbook["task_id"], field="due_date", new_value="2025-11-26"),
            ],
        ),
        (
            c,
            "How many tasks does Zara have in progress?",
            [
                lookup("Zara"),
                call("project_management_search_tasks", assigned_to_email=zara, list_name="In Progress"),
            ],
            asks(
                [how_many(len(t.project_tasks(assigned_to_email=zara, list_name="In Progress")), "tasks")],
                [
                    *(
                        len(t.project_tasks(assigned_to_email=zara, list_name=name))
                        for name in LISTS
                        if name != "In Progress"
                    ),
                    len(t.project_tasks(assigned_to_email=zara)),
                ],
            ),
        ),
        (
            c,
            "Move the 'Set up feature flag service' task to In Progress.",
            [
                call("project_management_search_tasks", task_name="feature flag"),
                call(update, task_id=flags["task_id"], field="list_name", new_value="In Progress"),
            ],
        ),
        (
            c,
            "Rename the task 'Empty-state illustrations' to 'Empty-state illustrations for reports'.",
            [
                call("project_management_search_tasks", task_name="Empty-state illustrations"),
                call(
                    update,
                    task_id=empty["task_id"],
                    field="task_name",
                    new_value="Empty-state illustrations for reports",
                ),
            ],
        ),
        (
            c,
            "Move 'Chart color scheme for dark mode' from the design board to the front end board and assign it to "
            "Mateo.",
            [
                call("project_management_search_tasks", task_name="Chart color scheme"),
                lookup("Mateo"),
                call(update, task_id=colors["task_id"], field="board", new_value="Front end"),
                call(update, task_id=colors["task_id"], field="assigned_to_email", new_value=mateo),
            ],
        ),
    ]


def crm_tasks(t: Tables) -> list[Spec]:
    amara, oscar, julien, sunita, nadia = (
        person(x).email for x in ("Amara", "Oscar", "Julien", "Sunita", "Nadia")
    )
    training = t.customers_where(
        lambda c: (
            c["assigned_to_email"] == amara and c["status"] == "Lead" and c["product_interest"] == "Training"
        )
    )
    lost = t.customers_where(
        lambda c: (
            c["assigned_to_email"] == julien and c["status"] == "Lost" and c["product_interest"] == "Hardware"
        )
    )
    four_weeks = (TODAY - timedelta(weeks=4)).isoformat()
    stale = t.customers_where(
        lambda c: (
            c["status"] == "Proposal"
            and c["product_interest"] == "Services"
            and c["last_contact_date"] < four_weeks
        )
    )
    assert not t.customers_where(lambda c: c["last_contact_date"] == four_weeks and c["status"] == "Proposal")
    wendell, tobias = t.customer_named("Wendell Ashby"), t.customer_named("Tobias Engel")
    next_friday = str(NEXT_MONDAY + timedelta(days=4))
    follow_ups = t.customers_where(
        lambda c: c["assigned_to_email"] == nadia and TODAY.isoformat() <= c["follow_up_by"] <= next_friday
    )
    assert len(follow_ups) >= 2
    c = "workplace_assistant_customer_relationship_manager"
    search, update = (
        "customer_relationship_manager_search_customers",
        "customer_relationship_manager_update_customer",
    )
    return [
        (
            c,
            "Oscar is taking over Amara's leads that are interested in training. Reassign them in the CRM.",
            [
                lookup("Amara"),
                lookup("Oscar"),
                call(search, assigned_to_email=amara, product_interest="Training", status="Lead"),
                *(
                    call(update, customer_id=x["customer_id"], field="assigned_to_email", new_value=oscar)
                    for x in training
                ),
            ],
        ),
        (
            c,
            "Delete all of Julien's lost customers that were interested in hardware.",
            [
                lookup("Julien"),
                call(search, assigned_to_email=julien, status="Lost", product_interest="Hardware"),
                *(
                    call("customer_relationship_manager_delete_customer", customer_id=x["customer_id"])
                    for x in lost
                ),
            ],
        ),
        (
            c,
            "Move every customer with a services proposal who hasn't been contacted in four weeks to Lost.",
            [
                call(
                    search, status="Proposal", product_interest="Services", last_contact_date_max=four_weeks
                ),
                *(
                    call(update, customer_id=x["customer_id"], field="status", new_value="Lost")
                    for x in stale
                ),
            ],
        ),
        (
            c,
            "Add Beatrix Solano from Quarryline (beatrix.solano@quarryline.co) to the CRM as a new lead interested "
            "in software, assigned to Sunita.",
            [
                lookup("Sunita"),
                call(
                    "customer_relationship_manager_add_customer",
                    customer_name="Beatrix Solano",
                    assigned_to_email=sunita,
                    status="Lead",
                    customer_email="beatrix.solano@quarryline.co",
                    product_interest="Software",
                ),
            ],
        ),
        (
            c,
            "Wendell Ashby's new phone number is 617-555-0199. Update it in the CRM.",
            [
                call(search, customer_name="Wendell Ashby"),
                call(
                    update,
                    customer_id=wendell["customer_id"],
                    field="customer_phone",
                    new_value="617-555-0199",
                ),
            ],
        ),
        (
            c,
            "Which of Nadia's customers have a follow-up due between today and next Friday?",
            [
                lookup("Nadia"),
                call(
                    search,
                    assigned_to_email=nadia,
                    follow_up_by_min=TODAY.isoformat(),
                    follow_up_by_max=next_friday,
                ),
            ],
            asks(
                [x["customer_name"] for x in follow_ups],
                [
                    x["customer_name"]
                    for x in t.customers_where(lambda c: c["assigned_to_email"] == nadia)
                    if x not in follow_ups
                ],
            ),
        ),
        (
            c,
            "Tobias Engel signed today. Mark him as won in the CRM and set his last contact date to today.",
            [
                call(search, customer_name="Tobias Engel"),
                call(update, customer_id=tobias["customer_id"], field="status", new_value="Won"),
                call(
                    update,
                    customer_id=tobias["customer_id"],
                    field="last_contact_date",
                    new_value=TODAY.isoformat(),
                ),
            ],
        ),
    ]


def cross_tasks(t: Tables) -> list[Spec]:
    grace, nadia, oscar = (person(x).email for x in ("Grace", "Nadia", "Oscar"))
    hannah = person("Hannah Brooks").email
    tomorrow = t.events_on(TOMORROW)
    overdue = [
        x for x in t.project_tasks(board="Back end", list_name="In Progress") if x["due_date"] < str(TODAY)
    ]
    week = ("2025-11-03", "2025-11-09")
    visits, engaged = t.visit_count(*week), t.visit_count(*week, engaged=True)
    priscilla = t.customer_named("Priscilla Vance")
    won = t.customers_where(
        lambda c: (
            c["assigned_to_email"] == nadia
            and c["status"] == "Won"
            and c["last_contact_date"] >= "2025-11-01"
        )
    )
    benefits = t.latest_email(hannah, "benefits info session")
    expo = t.latest_email(oscar, "lead")
    c = "workplace_assistant_multi_domain"
    send = "email_send_email"
    return [
        (
            c,
            "Email each person I'm meeting tomorrow with the subject 'Tomorrow' and the body 'Looking forward to our "
            "meeting tomorrow.'",
            [
                call("calendar_search_events", **day_bounds(TOMORROW)),
                *(
                    call(
                        send,
                        recipient=e["participant_email"],
                        subject="Tomorrow",
                        body="Looking forward to our meeting tomorrow.",
                    )
                    for e in tomorrow
                ),
            ],
        ),
        (
            c,
            "Hannah Brooks asked me to put the benefits info session on my calendar with her. Find her email and "
            "create the event with the name, time and length she gave.",
            [
                call("email_search_emails", query="benefits info session"),
                call("email_get_email_information_by_id", email_id=benefits["email_id"], field="body"),
                call(
                    "calendar_create_event",
                    event_name="Benefits info session",
                    participant_email=hannah,
                    event_start="2025-11-25 11:00:00",
                    duration="45",
                ),
            ],
        ),
        (
            c,
            "For each back end task in progress whose due date has passed, email its assignee with the subject "
            "'Overdue: <task name>' and the body 'Please update the due date or move it to review.'",
            [
                call("project_management_search_tasks", board="Back end", list_name="In Progress"),
                *(
                    call(
                        send,
                        recipient=x["assigned_to_email"],
                        subject=f"Overdue: {x['task_name']}",
                        body="Please update the due date or move it to review.",
                    )
                    for x in overdue
                ),
            ],
        ),
        (
            c,
            "Email Grace last week's website numbers with the subject 'Weekly traffic' and the body 'Total visits: "
            "<number>. Engaged users: <number>.'",
            [
                call("analytics_total_visits_count", time_min=week[0], time_max=week[1]),
                call("analytics_engaged_users_count", time_min=week[0], time_max=week[1]),
                lookup("Grace"),
                call(
                    send,
                    recipient=grace,
                    subject="Weekly traffic",
                    body=f"Total visits: {visits}. Engaged users: {engaged}.",
                ),
            ],
        ),
        (
            c,
            "Set up a 30-minute 'Renewal check-in' with the customer Priscilla Vance tomorrow at 2pm.",
            [
                call("customer_relationship_manager_search_customers", customer_name="Priscilla Vance"),
                call(
                    "calendar_create_event",
                    event_name="Renewal check-in",
                    participant_email=priscilla["customer_email"],
                    event_start=f"{TOMORROW} 14:00:00",
                    duration="30",
                ),
            ],
        ),
        (
            c,
            "Send a thank-you email to each of Nadia's customers that we won this month, with the subject 'Welcome to "
            "Fernbrook' and the body 'Thank you for choosing Fernbrook Analytics. We are glad to have you with us.'",
            [
                lookup("Nadia"),
                call(
                    "customer_relationship_manager_search_customers",
                    assigned_to_email=nadia,
                    status="Won",
                    last_contact_date_min="2025-11-01",
                ),
                *(
                    call(
                        send,
                        recipient=x["customer_email"],
                        subject="Welcome to Fernbrook",
                        body="Thank you for choosing Fernbrook Analytics. We are glad to have you with us.",
                    )
                    for x in won
                ),
            ],
        ),
        (
            c,
            "Oscar emailed me about a lead he met at the expo. Add them to the CRM exactly as he asks.",
            [
                call("email_search_emails", query="lead expo oscar"),
                call("email_get_email_information_by_id", email_id=expo["email_id"], field="body"),
                call(
                    "customer_relationship_manager_add_customer",
                    customer_name="Lior Bendavid",
                    assigned_to_email=oscar,
                    status="Lead",
                    customer_email="lior.bendavid@saltmarshfoods.com",
                    product_interest="Consulting",
                ),
            ],
        ),
    ]


# ----- rows ---------------------------------------------------------------------------------------


def row(
    number: int, category: str, request: str, solution: list[Call], answer: Answer | None = None
) -> dict[str, Any]:
    encoded = [{"name": c["name"], "arguments": json.dumps(c["arguments"])} for c in solution]
    return {
        "id": number,
        "responses_create_params": {
            "input": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": request}],
            "parallel_tool_calls": False,
            "temperature": 1.0,
        },
        "ground_truth": [c for c in encoded if c["name"] in WRITES],
        **(answer or {}),
        "category": category,
        "environment_name": "workplace_assistant",
        "solution": encoded,
    }


def check(specs: list[Spec]) -> None:
    """Every solution fits the env's default turn limit; batches hold at least two writes; a request
    that asks a question carries its answer, and only such a request does."""
    for _, request, solution, *answer in specs:
        writes = [c for c in solution if c["name"] in WRITES]
        assert len(solution) < MAX_TURNS, (request, len(solution))  # one call a turn, then the answer
        if any(word in request for word in (" all ", "every", "each ")):
            assert len(writes) >= 2, request
        assert ("?" in request) == bool(answer), request


def task_lines(tables: dict[str, list[Row]]) -> str:
    """The text of ``tasks.jsonl`` for ``tables``."""
    t = Tables(tables)
    specs = [
        *email_tasks(t),
        *calendar_tasks(t),
        *analytics_tasks(t),
        *project_tasks(t),
        *crm_tasks(t),
        *cross_tasks(t),
    ]
    check(specs)
    return "".join(json.dumps(row(i, *spec), ensure_ascii=False) + "\n" for i, spec in enumerate(specs))


def main() -> None:
    tables = build()
    write(tables)
    text = task_lines(tables)
    TASKS_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {text.count(chr(10))} tasks to {Path(TASKS_FILE).relative_to(OUT.parents[3])}")


if __name__ == "__main__":
    main()
