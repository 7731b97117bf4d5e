"""Write envs/long_context/data/samples.jsonl: long synthetic document sets with multi-hop questions.

Everything here is invented for cascade-envs (organisations, people, numbers). Each document set is
built from seeded records, rendered as reports, logs and minutes, and each question's answer is
computed from those records, so it needs facts from two or more places in the documents. The
output is deterministic: run it again and the file is byte-identical.

    python bench/data/make_long_context_samples.py [OUT]
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "envs" / "long_context" / "data" / "samples.jsonl"

FIRST = [
    "Amara",
    "Bilal",
    "Carmen",
    "Dmitri",
    "Elena",
    "Farid",
    "Grace",
    "Hiroshi",
    "Ines",
    "Jonas",
    "Keisha",
    "Lars",
    "Mei",
    "Nikhil",
    "Olga",
    "Pedro",
    "Quinn",
    "Rosa",
    "Samuel",
    "Tamsin",
    "Uma",
    "Victor",
    "Wen",
    "Xavier",
    "Yara",
    "Zoltan",
    "Aoife",
    "Bruno",
    "Chidi",
    "Delphine",
    "Emeka",
    "Freya",
]
LAST = [
    "Okafor",
    "Lindqvist",
    "Marchetti",
    "Haddad",
    "Nakamura",
    "Brennan",
    "Kowalski",
    "Oyelaran",
    "Petrov",
    "Sandoval",
    "Thornbury",
    "Vasquez",
    "Whitcombe",
    "Achterberg",
    "Castellano",
    "Dunmore",
    "Eriksen",
    "Fairweather",
    "Gallagher",
    "Holloway",
    "Iwasaki",
    "Jablonski",
    "Kerrigan",
    "Lachance",
    "Mbeki",
]


def people(rng: random.Random, n: int) -> list[str]:
    names: list[str] = []
    while len(names) < n:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if name not in names and name.split()[1] not in {x.split()[1] for x in names}:
            names.append(name)
    return names


def day(d: date) -> str:
    return f"{d.day} {d:%B %Y}"


def money(x: float) -> str:
    return f"${x:,.0f}"


@dataclass
class Sample:
    set_id: str
    category: str
    titles: list[str]
    documents: list[str]
    questions: list[tuple[str, str]]


# ----- A: a water district's minutes and incident log ---------------------------------------------------

FACILITIES = [
    "Alder Creek Pump Station",
    "Kestrel Ridge Pump Station",
    "Millbrook Pump Station",
    "Dunmore Reservoir",
    "Harbourview Treatment Plant",
    "Seacliff Booster Station",
    "Orchard Lane Pump Station",
    "North Basin Wellfield",
]
INCIDENTS = [
    (
        "pump failure",
        "Pump {n} tripped on overload; crew isolated the unit and ran the duty/standby changeover by hand.",
        (4, 20),
    ),
    (
        "power outage",
        "Utility supply lost on both feeders; standby generator {gen} after a {delay}-minute delay.",
        (2, 14),
    ),
    (
        "SCADA alarm",
        "Loss of telemetry from the site RTU; radio link re-established after the antenna cable was reseated.",
        (0, 0),
    ),
    (
        "main break",
        "Break on the {size} mm discharge main outside the station; section valved off and repaired with a full-circle clamp.",
        (6, 26),
    ),
    (
        "valve fault",
        "Check valve on pump {n} failed to seat, causing reverse flow at shutdown; valve flapped and re-seated.",
        (1, 6),
    ),
    (
        "water quality",
        "Free chlorine residual fell to {cl} mg/L at the outlet; dosing pump primed and residual restored.",
        (0, 0),
    ),
    (
        "flooding",
        "Dry well sump pump failed and water rose to {depth} mm; portable pump deployed, float switch replaced.",
        (0, 8),
    ),
    (
        "security",
        "Perimeter gate found forced; no entry to the building. Police report filed and padlock replaced.",
        (0, 0),
    ),
]
AGENDA = [
    "the annual audit engagement letter with {firm}",
    "a revised policy on customer payment plans",
    "the purchase of two replacement service trucks",
    "the renewal of the chemical supply agreement for sodium hypochlorite",
    "the district's participation in the regional drought contingency plan",
    "a cooperative agreement with the county on shared fire-flow testing",
    "an amendment to the employee handbook on standby pay",
    "the award of the meter replacement program, phase three",
]


def water_district(rng: random.Random) -> Sample:
    crew = people(rng, 6)
    board = people(rng, 5)
    gm, ops, clerk = people(rng, 3)
    start = date(2023, 1, 3)
    log: list[dict] = []
    number = 101
    current = start
    while current < date(2023, 4, 28):
        current += timedelta(days=rng.choice([1, 1, 2, 3]))
        kind, text, hours = rng.choice(INCIDENTS)
        facility = rng.choice(FACILITIES)
        outage = rng.randint(*hours) if hours[1] else 0
        entry = dict(
            wo=f"WO-2023-{number:04d}",
            date=current,
            time=f"{rng.randint(0, 23):02d}:{rng.choice([5, 12, 20, 34, 47, 58]):02d}",
            facility=facility,
            kind=kind,
            outage=outage,
            crew=rng.choice(crew),
            text=text.format(
                n=rng.randint(1, 4),
                gen=rng.choice(["started", "was started manually"]),
                delay=rng.randint(2, 25),
                size=rng.choice([200, 250, 300, 450]),
                cl=rng.choice(["0.12", "0.18", "0.21"]),
                depth=rng.randint(80, 400),
            ),
        )
        number += rng.randint(3, 9)
        log.append(entry)
    # the incident behind the March emergency contract
    key = next(e for e in log if e["date"] >= date(2023, 2, 27))
    key.update(
        facility="Alder Creek Pump Station",
        kind="power outage",
        outage=31,
        text="Lightning strike during the storm damaged the motor control centre; all three pumps lost. "
        "Temporary generator and bypass pumping set up; station returned to service on temporary wiring.",
    )
    distractor = next(e for e in log if e["date"] >= date(2023, 1, 30) and e is not key)
    distractor.update(
        facility="Seacliff Booster Station",
        kind="main break",
        outage=19,
        text="Break on the 300 mm discharge main under the access road; repaired with a full-circle clamp.",
    )
    oldest = "Millbrook Pump Station"

    def incident_line(e: dict) -> str:
        out = f"Outage: {e['outage']} h." if e["outage"] else "No loss of service."
        return (
            f"{e['wo']} | {day(e['date'])} {e['time']} | {e['facility']} | {e['kind']}\n"
            f"  {e['text']} {out} Crew lead: {e['crew']}. Status: closed."
        )

    log_doc = (
        "Harbourview Water District - Operations Incident Log, January to April 2023\n"
        f"Compiled by the Operations Division ({ops}, Operations Superintendent). Times are local. Outage "
        "hours count from loss of service at the facility to its return to normal supply.\n\n"
        + "\n\n".join(incident_line(e) for e in log)
    )

    meetings = [date(2023, 1, 17), date(2023, 2, 21), date(2023, 3, 21), date(2023, 4, 18)]
    minutes = ["Harbourview Water District - Minutes of the Regular Meetings of the Board of Directors, 2023"]
    for i, when in enumerate(meetings):
        absent = rng.choice(board)
        present = [b for b in board if b != absent]
        month = [
            e for e in log if e["date"].month == when.month - 1 or (when.month == 1 and e["date"] < when)
        ]
        n_out = sum(1 for e in month if e["outage"])
        parts = [
            f"\nREGULAR MEETING OF {day(when).upper()}",
            f"1. Call to order. President {present[0]} called the meeting to order at 6:0{i + 1} p.m. in the district "
            f"board room. Present: Directors {', '.join(present)}. Absent: Director {absent} (excused). Staff: "
            f"{gm}, General Manager; {ops}, Operations Superintendent; {clerk}, Board Secretary.",
            f"2. Approval of minutes. The minutes of the previous regular meeting were approved as presented "
            f"(motion {present[1]}, second {present[2]}; carried {len(present)}-0).",
            f"3. Public comment. {rng.choice(['No members of the public addressed the board.', 'One resident of Orchard Lane asked about the timing of the meter replacement work; staff will follow up in writing.', 'Two residents raised low pressure during evening hours on the east side; the General Manager said the Operations Division is reviewing pressure logs.'])}",
            f"4. General Manager's report. {gm} reported that {rng.randint(11, 19)} service connections were added in "
            f"the previous month and that water sales were {rng.randint(2, 9)}% {rng.choice(['above', 'below'])} the "
            f"budget forecast. {rng.choice(['Staffing is at full strength.', 'One operator position remains vacant; interviews are scheduled.', 'Two operators completed their grade 3 certification.'])}",
            f"5. Operations report. {ops} summarised the incident log: {len(month)} work orders in the period, of which "
            f"{n_out} involved a loss of service at a facility. {rng.choice(['Distribution flushing is on schedule.', 'The valve exercising program completed 212 valves.', 'Leak detection surveys covered 14 km of main.'])}",
        ]
        firm = rng.choice(["Corbin & Leal LLP", "Mayfield Audit Partners"])
        item = AGENDA[i * 2].format(firm=firm)
        parts.append(
            f"6. Consent calendar. The board approved {item} (motion {present[2]}, second {present[3]}; "
            f"carried {len(present)}-0)."
        )
        if i == 1:
            parts.append(
                f"7. Asset condition assessment. {gm} presented the consultant's condition assessment of the pumping "
                f"stations. The pumps at {oldest} are the oldest in the system, installed in 1968, and are recommended "
                f"for replacement in the next five-year capital plan. Kestrel Ridge and Orchard Lane were rated fair; "
                f"the remaining stations were rated good. The board received the report and directed staff to return "
                f"with a phasing plan."
            )
            parts.append(
                f"8. Emergency repairs ratification. The board ratified the emergency repair of the discharge main in "
                f"response to incident {distractor['wo']}, performed by Coastal Pipeline Constructors for "
                f"{money(62_400)} (motion {present[0]}, second {present[1]}; carried {len(present)}-0)."
            )
        if i == 2:
            parts.append(
                f"7. Emergency contract. {ops} described the storm damage recorded as incident {key['wo']}. The "
                f"motor control centre cannot be repaired and must be replaced; temporary wiring is in service. Staff "
                f"recommended an emergency contract with Tidewater Electrical Services, the only bidder able to supply "
                f"switchgear within six weeks. Motion by Director {present[1]}, second by Director {present[3]}, to "
                f"award an emergency contract to Tidewater Electrical Services for {money(184_650)} to replace the "
                f"motor control centre damaged in incident {key['wo']}. Carried {len(present)}-0."
            )
            parts.append(
                f"8. Capital budget amendment. The board amended the capital budget to move {money(120_000)} from "
                f"the reservoir coating project to the electrical contingency line (motion {present[2]}, second "
                f"{present[0]}; carried {len(present)}-0)."
            )
        parts.append(
            f"{len(parts)}. {AGENDA[i * 2 + 1].capitalize()} was presented for information; the board will "
            f"consider it at a future meeting."
        )
        parts.append(
            f"{len(parts)}. Adjournment. There being no further business, the meeting was adjourned at "
            f"{rng.randint(7, 8)}:{rng.randint(10, 55)} p.m. Minutes recorded by {clerk}, Board Secretary."
        )
        minutes.append("\n\n".join(parts))
    key_hours = key["outage"]
    oldest_max = max(e["outage"] for e in log if e["facility"] == oldest)
    return Sample(
        "water_district",
        "Utilities",
        ["Board minutes, January to April 2023", "Operations incident log"],
        ["\n".join(minutes), log_doc],
        [
            (
                "At its March meeting the board awarded an emergency contract for electrical work. At which facility did "
                "the incident behind that contract happen, and how many hours of outage does the incident log record for it?",
                f"Alder Creek Pump Station, with an outage of {key_hours} hours",
            ),
            (
                "In February the board heard which pumping facility has the oldest pumps in the system. What is the longest "
                "outage, in hours, that the incident log records at that facility?",
                f"{oldest_max} hours (at {oldest})",
            ),
        ],
    )


# ----- B: a software company's postmortems, on-call rota and deploy log ----------------------------------

SERVICES = [
    "payments-api",
    "ledger-sync",
    "auth-gateway",
    "search-indexer",
    "notifications",
    "checkout-web",
    "inventory-svc",
]
CHANGES = [
    "bump dependency versions",
    "add retry to upstream client",
    "tune connection pool size",
    "feature flag cleanup",
    "new metrics for queue depth",
    "fix pagination off-by-one",
    "refactor config loading",
    "increase request timeout",
    "schema migration (additive)",
    "logging: drop PII fields",
    "cache warm-up on start",
    "rate limiter rewrite",
]


def software_ops(rng: random.Random) -> Sample:
    engineers = people(rng, 8)
    q_start = datetime(2024, 7, 1, 9, 0)
    rota = []
    for week in range(13):
        primary = engineers[(week * 3) % 8]
        secondary = engineers[(week * 3 + 5) % 8]
        rota.append((q_start + timedelta(weeks=week), primary, secondary))
    deploys = []
    t = q_start
    versions = {s: [rng.randint(1, 4), rng.randint(0, 30), 0] for s in SERVICES}
    number = 40_211
    while t < datetime(2024, 9, 30):
        t += timedelta(hours=rng.randint(5, 30), minutes=rng.randint(0, 59))
        service = rng.choice(SERVICES)
        v = versions[service]
        v[2] += 1
        if rng.random() < 0.2:
            v[1], v[2] = v[1] + 1, 0
        deploys.append(
            dict(
                id=f"D-{number}",
                time=t,
                service=service,
                version=".".join(map(str, v)),
                author=rng.choice(engineers),
                change=rng.choice(CHANGES),
                result=rng.choice(["success"] * 8 + ["rolled back", "failed health check"]),
            )
        )
        number += rng.randint(1, 6)
    culprit = next(
        d for d in deploys if d["time"] >= datetime(2024, 8, 14, 10) and d["service"] == "checkout-web"
    )
    culprit.update(result="success", change="move session store to new cluster")
    begins = culprit["time"] + timedelta(minutes=37)
    incidents = []
    for n, (service, minutes, customer) in enumerate(
        [
            ("ledger-sync", 312, False),
            ("auth-gateway", 96, True),
            ("search-indexer", 141, False),
            ("notifications", 58, True),
            ("payments-api", 174, True),
        ]
    ):
        d = rng.choice([x for x in deploys if x["service"] == service])
        incidents.append(
            dict(
                id=f"INC-2024-{rng.randint(100, 199)}{n}",
                service=service,
                deploy=d,
                start=d["time"] + timedelta(minutes=rng.randint(10, 90)),
                minutes=minutes,
                customer=customer,
            )
        )
    incidents.append(
        dict(
            id="INC-2024-2071",
            service="checkout-web",
            deploy=culprit,
            start=begins,
            minutes=222,
            customer=True,
        )
    )
    incidents.sort(key=lambda i: i["start"])
    on_call = next(p for (w, p, _s) in reversed(rota) if w <= begins)

    def fmt(x: datetime) -> str:
        return x.strftime("%Y-%m-%d %H:%M UTC")

    posts = [
        "Northwind Commerce - Incident Postmortems, Q3 2024\nPrepared by the Site Reliability team. Durations run "
        "from the first failed customer request (or, for internal incidents, the first failed job) to full recovery."
    ]
    for inc in incidents:
        d = inc["deploy"]
        end = inc["start"] + timedelta(minutes=inc["minutes"])
        impact = (
            f"Customer-facing: yes. The error rate of {inc['service']} requests peaked at {rng.randint(8, 60)}%; "
            f"about {rng.randint(2, 40) * 100:,} customers were affected."
            if inc["customer"]
            else "Customer-facing: no. Internal batch processing only; no customer requests failed."
        )
        detect = rng.choice(
            [
                "Detected by the error-rate alert after 4 minutes.",
                "Detected by a customer support escalation.",
                "Detected by the synthetic probe in the eu-west region.",
            ]
        )
        cause = (
            f"Release {d['version']} of {inc['service']} ({d['change']}) went out at {d['time']:%H:%M}; "
            + rng.choice(
                [
                    "a missing index made the hot query scan the whole table",
                    "the new client opened a connection per request and exhausted the pool",
                    "a config key was renamed without a fallback, so the service used defaults",
                    "the new cluster's endpoint was missing from the allow-list of the firewall",
                ]
            )
            + "."
        )
        actions = [
            f"{rng.choice(engineers)}: add a canary stage for {inc['service']} (due in two weeks).",
            f"{rng.choice(engineers)}: alert on pool saturation, not only on errors.",
            f"{rng.choice(engineers)}: document the rollback procedure in the runbook.",
        ]
        timeline = [
            f"{fmt(inc['start'])} first failures",
            f"{fmt(inc['start'] + timedelta(minutes=rng.randint(3, 12)))} on-call paged",
            f"{fmt(inc['start'] + timedelta(minutes=inc['minutes'] // 2))} cause identified",
            f"{fmt(end)} full recovery confirmed",
        ]
        posts.append(
            f"\n{inc['id']}: {inc['service']} degradation\nStart: {fmt(inc['start'])}. End: {fmt(end)}. "
            f"Duration: {inc['minutes'] // 60} h {inc['minutes'] % 60} min.\n{impact}\n{detect}\n"
            f"Root cause. {cause}\nTimeline:\n- "
            + "\n- ".join(timeline)
            + "\nAction items:\n- "
            + "\n- ".join(actions)
            + "\nWhat went well: "
            + rng.choice(
                [
                    "the rollback was fast once decided.",
                    "communication with support was clear.",
                    "dashboards showed the failing dependency at once.",
                ]
            )
        )
    rota_doc = (
        "Site Reliability on-call rota, Q3 2024\nHandover every Monday at 09:00 UTC. The primary takes every page; the "
        "secondary is paged if the primary does not acknowledge within 10 minutes.\n\n"
        + "\n".join(
            f"Week of {w:%Y-%m-%d} (from {w:%H:%M} UTC): primary {p}; secondary {s}" for w, p, s in rota
        )
        + "\n\nHandover notes\n"
        + "\n".join(
            f"{w:%Y-%m-%d}: {p} handed over from {rota[i - 1][1] if i else 'the Q2 rota'}. "
            + rng.choice(
                [
                    "Quiet week, two low-priority pages.",
                    "Noisy alerts on search-indexer; silenced after tuning.",
                    "Ongoing investigation into ledger-sync lag carried over.",
                    "No open incidents.",
                ]
            )
            for i, (w, p, _s) in enumerate(rota)
        )
    )
    deploy_doc = (
        "Deploy log, production, Q3 2024 (exported from the release tool)\nid | time | service | version | author | change | result\n"
        + "\n".join(
            f"{d['id']} | {fmt(d['time'])} | {d['service']} | {d['version']} | {d['author']} | {d['change']} | {d['result']}"
            for d in deploys
        )
    )
    return Sample(
        "software_ops",
        "Technology",
        ["Incident postmortems", "On-call rota", "Deploy log"],
        ["\n".join(posts), rota_doc, deploy_doc],
        [
            (
                "Consider the longest customer-facing outage of the quarter. Who was the primary on-call engineer when it "
                "began, and what is the ID of the deploy that caused it?",
                f"{on_call}; deploy {culprit['id']}",
            )
        ],
    )


# ----- C: a clinical trial's steering committee minutes and enrollment reports ---------------------------

SITES = [
    "Ashford General",
    "Brightwater University Hospital",
    "Calder Valley Clinic",
    "Dovercourt Medical Centre",
    "Eastleigh Research Unit",
    "Fenwick Royal Infirmary",
    "Glenmoor Community Hospital",
    "Hartwell Cardiac Institute",
]


def clinical_trial(rng: random.Random) -> Sample:
    pis = people(rng, len(SITES))
    committee = people(rng, 5)
    months = ["January", "February", "March", "April", "May", "June"]
    holds = {
        SITES[2]: 3,
        SITES[5]: 4,
        SITES[6]: 4,
    }  # site -> index of the month its hold starts (April, May, May)
    counts: dict[str, list[tuple[int, int, int]]] = {}
    for site in SITES:
        screened = randomized = withdrawn = 0
        series = []
        for m in range(6):
            if not (site in holds and m >= holds[site]):
                new_screened = rng.randint(3, 14)
                screened += new_screened
                randomized += rng.randint(1, new_screened - 1)
                withdrawn += rng.choice([0, 0, 0, 1])
            series.append((screened, randomized, withdrawn))
        counts[site] = series
    reports = [
        "LUMEN-2 (a phase II study of lumiretant in chronic cough) - Monthly Enrollment Status Reports, 2024\n"
        "Issued by the coordinating centre. Figures are cumulative since first patient in."
    ]
    for m, month in enumerate(months):
        rows = "\n".join(
            f"{site} (PI {pi}) | {counts[site][m][0]} | {counts[site][m][1]} | {counts[site][m][2]}"
            for site, pi in zip(SITES, pis, strict=True)
        )
        total = sum(counts[s][m][1] for s in SITES)
        note = rng.choice(
            [
                "Screen failure rate remains driven by spirometry criteria.",
                "Two sites reported IRT outages of under an hour.",
                "Data entry lag is under five working days at every site.",
                "The drug supply forecast covers enrollment through Q4.",
            ]
        )
        narrative = " ".join(
            rng.sample(
                [
                    "Recruitment is tracked against the planned curve of 40 randomized participants a month.",
                    "Screen failures were mostly for a baseline cough frequency below the threshold of 10 coughs an hour.",
                    "The most common reason for withdrawal was relocation; no withdrawal was for an adverse event.",
                    "Query resolution time averaged 6.2 days, inside the 10-day target.",
                    "Central laboratory sample rejection stayed below 2%.",
                    "Cough monitor recordings failing quality control were repeated within the visit window.",
                    "Protocol deviations reported this month were all minor (visit windows missed by one or two days).",
                    "Site initiation materials were refreshed to include the remote consent amendment.",
                    "The interactive response system was available 99.9% of the month.",
                    "Drug accountability logs were reconciled at every site visited this month.",
                ],
                4,
            )
        )
        reports.append(
            f"\nEnd of {month} 2024 report\n{narrative}\nSite | screened | randomized | withdrawn\n{rows}\n"
            f"Study total randomized: {total}. {note}"
        )
    minutes = ["LUMEN-2 Steering Committee - Meeting Minutes, 2024"]
    for when, text in [
        (
            "14 February 2024",
            f"The committee reviewed the recruitment curve, which is on target. {committee[1]} reported "
            "no unblinded safety signal from the data monitoring committee's open session. The amendment allowing "
            "remote consent was approved for submission to the ethics committees.",
        ),
        (
            "10 April 2024",
            f"Monitoring found repeated dosing-diary errors at {SITES[2]}, including missing entries for three "
            f"participants. The committee placed {SITES[2]} on enrollment hold from 1 April until retraining is complete; "
            f"participants already randomized continue on study. {committee[3]} will lead the retraining.",
        ),
        (
            "15 May 2024",
            f"A pharmacy temperature excursion at {SITES[5]} affected one shipment of study drug, and a "
            f"staffing gap left {SITES[6]} without a study coordinator. Both sites were placed on enrollment hold from "
            f"1 May. The hold at {SITES[2]} continues; retraining is half complete. {committee[0]} asked the coordinating "
            "centre to model the effect of the holds on the last-patient-in date.",
        ),
        (
            "19 June 2024",
            "The modelled last-patient-in date moves by six weeks if all holds continue to September. The "
            "committee asked sites with spare capacity to extend screening hours.",
        ),
    ]:
        minutes.append(
            f"\nMeeting of {when}\nPresent: {', '.join(committee)} (chair {committee[0]}); coordinating "
            f"centre staff.\n{text}\nAny other business: "
            + rng.choice(
                [
                    "none.",
                    "the next investigator meeting will be held online.",
                    "the newsletter will profile two sites.",
                ]
            )
        )
    cras = people(rng, 3)
    visits = [
        "LUMEN-2 - Monitoring Visit Report Summaries, 2024\nOn-site visits by the clinical research associates "
        "(CRAs); each summary lists what was reviewed, what was found and the follow-up agreed with the site."
    ]
    for site, pi in zip(SITES, pis, strict=True):
        for visit in (1, 2, 3):
            when = date(2024, 2 * visit - 1 + rng.randint(0, 1), rng.randint(2, 27))
            found = rng.sample(
                [
                    "Source data verification of all consent forms found no discrepancies.",
                    "Two cough monitor recordings were uploaded outside the 48-hour window.",
                    "The delegation log lacked the signature of a newly added sub-investigator.",
                    "Investigational product was stored correctly and the temperature log was complete.",
                    "One serious adverse event (hospitalisation for pneumonia) was reported on time.",
                    "Essential documents in the investigator site file were current.",
                    "Spirometry calibration records were missing for one week in the period.",
                    "Eligibility was confirmed for every participant reviewed.",
                    "The site's recruitment from the respiratory clinic is ahead of plan.",
                ],
                3,
            )
            visits.append(
                f"\n{site}, visit {visit} on {day(when)} (CRA {rng.choice(cras)}, PI {pi}). Reviewed: consent, "
                f"eligibility, drug accountability and the cough monitor uploads of {rng.randint(4, 12)} "
                f"participants. Findings: {' '.join(found)} Follow-up: "
                + rng.choice(
                    [
                        "none required.",
                        "the site will file the missing records before the next visit.",
                        "retraining on the upload procedure was given during the visit.",
                        "the PI will countersign the updated delegation log.",
                    ]
                )
            )
    may, march, june = 4, 2, 5
    best = max(holds, key=lambda s: counts[s][may][1])
    assert sorted(counts[s][may][1] for s in holds).count(counts[best][may][1]) == 1
    grown = sum(counts[s][june][1] for s in SITES) - sum(counts[s][march][1] for s in SITES)
    return Sample(
        "clinical_trial",
        "Health",
        ["Steering committee minutes", "Monthly enrollment reports", "Monitoring visit reports"],
        ["\n".join(minutes), "\n".join(reports), "\n".join(visits)],
        [
            (
                "Of the sites that the steering committee placed on enrollment hold, which one had randomized the most "
                "participants according to the end of May report, and how many?",
                f"{best}, with {counts[best][may][1]} randomized",
            ),
            (
                "By how many participants did the study's total number randomized grow from the end of March report to the "
                "end of June report?",
                f"{grown} participants",
            ),
        ],
    )


# ----- D: a wind farm's maintenance log and monthly performance report -----------------------------------

CONTRACTORS = ["Nordwind Service", "Gale Force Technical", "Highline Rope Access", "Turbina Field Services"]
WORK = [
    (
        "scheduled service",
        "Six-monthly service: bolt torque checks, filters changed, grease points topped up.",
        (8, 14),
    ),
    ("fault reset", "Pitch system fault on blade {b}; encoder cleaned and turbine reset.", (1, 5)),
    (
        "inspection",
        "Drone inspection of the blades; leading-edge erosion noted on blade {b}, category {c}.",
        (2, 4),
    ),
    ("fault reset", "Converter over-temperature fault; cooling fan replaced and turbine reset.", (3, 9)),
    ("yaw repair", "Yaw brake pads worn; pads replaced on all calipers.", (6, 12)),
    (
        "blade repair",
        "Leading-edge erosion repair on blade {b} by rope access; filler and protective tape applied.",
        (6, 16),
    ),
    (
        "fault reset",
        "Grid loss ride-through event; turbine restarted remotely after the utility restored the feeder.",
        (1, 3),
    ),
    ("inspection", "Annual inspection of the fall-arrest system and service lift; no defects.", (2, 3)),
    (
        "hydraulics",
        "Hydraulic oil leak at the pitch accumulator of blade {b}; seal kit fitted and oil topped up.",
        (3, 8),
    ),
]


def wind_farm(rng: random.Random) -> Sample:
    turbines = [f"T{n:02d}" for n in range(1, 19)]
    techs = people(rng, 5)
    log = []
    for month in (7, 8, 9):
        for _ in range(rng.randint(34, 40)):
            kind, text, hours = rng.choice(WORK)
            log.append(
                dict(
                    date=date(2024, month, rng.randint(1, 28)),
                    turbine=rng.choice(turbines),
                    kind=kind,
                    text=text.format(b=rng.randint(1, 3), c=rng.randint(1, 3)),
                    hours=rng.randint(*hours),
                    contractor=rng.choice(CONTRACTORS),
                    tech=rng.choice(techs),
                )
            )
    worst = "T11"
    log.append(
        dict(
            date=date(2024, 8, 6),
            turbine=worst,
            kind="component replacement",
            text="Main bearing failure confirmed by vibration analysis; main bearing replaced using a 600 t crawler crane.",
            hours=163,
            contractor="Turbina Field Services",
            tech=techs[2],
        )
    )
    log.append(
        dict(
            date=date(2024, 8, 19),
            turbine="T04",
            kind="component replacement",
            text="Gearbox intermediate-stage damage; gearbox replaced.",
            hours=121,
            contractor="Nordwind Service",
            tech=techs[0],
        )
    )
    log.append(
        dict(
            date=date(2024, 7, 22),
            turbine=worst,
            kind="component replacement",
            text="Generator slip ring worn; slip ring assembly replaced.",
            hours=20,
            contractor="Gale Force Technical",
            tech=techs[1],
        )
    )
    log.sort(key=lambda e: (e["date"], e["turbine"]))
    august_hours = 31 * 24
    down = {t: sum(e["hours"] for e in log if e["turbine"] == t and e["date"].month == 8) for t in turbines}
    avail = {t: 100 * (1 - down[t] / august_hours) for t in turbines}
    assert min(avail, key=avail.__getitem__) == worst
    log_doc = (
        "Carrow Fell Wind Farm (18 x 3.6 MW) - Maintenance Log, July to September 2024\nEach entry: date, turbine, work "
        "type, description, turbine downtime in hours, contractor, site technician.\n\n"
        + "\n\n".join(
            f"{day(e['date'])} - {e['turbine']} - {e['kind']}\n{e['text']} Downtime {e['hours']} h. "
            f"Contractor: {e['contractor']}. Site technician: {e['tech']}."
            for e in log
        )
    )
    wind = [rng.uniform(6.8, 8.9) for _ in range(3)]
    report = [
        f"Carrow Fell Wind Farm - Monthly Performance Report, August 2024\nSummary. Mean hub-height wind speed was "
        f"{wind[1]:.1f} m/s against a long-term August mean of 7.6 m/s. Fleet technical availability was "
        f"{sum(avail.values()) / 18:.1f}%. Grid curtailment instructions were received on "
        f"{rng.randint(2, 6)} days and are excluded from availability.",
        "Availability by turbine (time-based, downtime from the maintenance log):\n"
        + "\n".join(f"{t}: {avail[t]:.1f}%" for t in turbines),
        "Commentary. "
        + " ".join(
            rng.choice(
                [
                    "Blade inspections continue on the east string.",
                    "The SCADA upgrade is scheduled for October.",
                    "Spare parts stock was audited; two pitch motors are on order.",
                    "No lost-time injuries were recorded.",
                    "Noise monitoring at the nearest dwelling remained within consent limits.",
                ]
            )
            for _ in range(5)
        ),
        "Health and safety. "
        + " ".join(
            f"Toolbox talk held on {topic}."
            for topic in rng.sample(
                [
                    "working at height",
                    "lifting operations",
                    "lone working",
                    "electrical isolation",
                    "heat stress",
                    "manual handling",
                ],
                4,
            )
        ),
    ]
    bearing = next(
        e
        for e in log
        if e["turbine"] == worst and e["date"].month == 8 and e["kind"] == "component replacement"
    )
    return Sample(
        "wind_farm",
        "Energy",
        ["Maintenance log", "Monthly performance report, August"],
        [log_doc, "\n\n".join(report)],
        [
            (
                "Which turbine had the lowest availability in the August performance report, which major component was "
                "replaced on it that month, and which contractor did the work?",
                f"{worst}; its main bearing was replaced by {bearing['contractor']}",
            )
        ],
    )


# ----- E: an excavation's field diary and finds register --------------------------------------------------

MATERIALS = ["copper alloy", "iron", "ceramic", "glass", "worked bone", "flint", "lead", "shale"]
OBJECTS = {
    "copper alloy": ["brooch pin", "finger ring", "strap fitting"],
    "iron": ["nail", "knife blade", "hobnail"],
    "ceramic": ["spindle whorl", "rim sherd, greyware", "loom weight fragment"],
    "glass": ["bead, blue", "vessel fragment"],
    "worked bone": ["pin", "comb fragment"],
    "flint": ["scraper", "retouched flake"],
    "lead": ["weight", "spindle whorl"],
    "shale": ["bracelet fragment"],
}


def excavation(rng: random.Random) -> Sample:
    staff = people(rng, 6)
    days = [
        date(2023, 7, 3) + timedelta(days=i)
        for i in range(40)
        if (date(2023, 7, 3) + timedelta(days=i)).weekday() < 5
    ]
    natural_day = days[17]
    diary = [
        "Holm Barrow Excavation 2023 - Site Director's Field Diary\nTrenches 1 to 4; context numbers are prefixed by the "
        "trench number (1001 in Trench 1, 3001 in Trench 3, and so on)."
    ]
    finds = []
    sf = 1
    contexts = {t: t * 1000 + 1 for t in (1, 2, 3, 4)}
    for d in days:
        weather = rng.choice(
            [
                "Dry and bright",
                "Overcast, light drizzle after lunch",
                "Hot; shade breaks every hour",
                "Heavy rain until 11:00, work restarted after pumping",
                "Windy, dry",
            ]
        )
        lines = [f"\n{d:%A} {day(d)}. {weather}. On site: {', '.join(rng.sample(staff, 4))}."]
        for trench in rng.sample([1, 2, 3, 4], 4):
            contexts[trench] += rng.choice([0, 1, 1])
            ctx = contexts[trench]
            if trench == 3 and d > natural_day:
                lines.append(
                    "Trench 3: "
                    + rng.choice(
                        [
                            f"planned the features cut into the natural; post-hole {ctx} half-sectioned.",
                            f"excavated the gully cut into the natural; its fill numbered {ctx}.",
                            "cleaned the natural surface for the final photographs; no further features.",
                            f"recorded stake-holes cut into the natural along the southern edge; fills numbered from {ctx}.",
                        ]
                    )
                )
            elif trench == 3 and d == natural_day:
                lines.append(
                    f"Trench 3: removed the last of the ditch fill {ctx}; natural subsoil, orange sandy clay, "
                    f"reached across the whole trench for the first time. Section drawn and photographed."
                )
            else:
                lines.append(
                    f"Trench {trench}: "
                    + rng.choice(
                        [
                            f"continued excavating {ctx}, a mid-brown silty loam with charcoal flecks.",
                            f"cleaned back and planned {ctx}; a possible post-hole cut recorded.",
                            f"half-sectioned pit fill {ctx}; soil samples taken for flotation.",
                            f"removed the plough soil over the northern end; {ctx} defined below it.",
                            f"recorded a stone spread, {ctx}, and lifted it after planning.",
                            f"took {ctx} down in 50 mm spits to look for a buried land surface; none seen so far.",
                            f"recorded the north-facing section through {ctx} at 1:10 and took monoliths for micromorphology.",
                            f"excavated the recut visible in the section; the recut fill was numbered {ctx}.",
                            f"metal-detected the spoil from {ctx} as it came off; nothing but modern iron.",
                        ]
                    )
                    + " "
                    + rng.choice(
                        [
                            "",
                            "Soil is drying out fast and needs spraying before trowelling.",
                            "Levels taken on the surface with the dumpy level.",
                            "Animal bone is frequent but poorly preserved.",
                            "Pottery so far is all hand-made and undiagnostic.",
                        ]
                    )
                )
            if rng.random() < 0.55 and not (
                trench == 3 and d >= natural_day - timedelta(days=2) and d != natural_day
            ):
                material = rng.choice(MATERIALS)
                finds.append(
                    dict(
                        sf=f"SF{sf:03d}",
                        date=d,
                        ctx=ctx,
                        trench=trench,
                        material=material,
                        object=rng.choice(OBJECTS[material]),
                        by=rng.choice(staff),
                    )
                )
                sf += 1
        lines.append(
            rng.choice(
                [
                    "Finds washing in the afternoon.",
                    "Environmental samples logged.",
                    "Visit from the county archaeologist.",
                    "Site tour for the local history society.",
                    "Total station survey of the day's features.",
                ]
            )
        )
        diary.append(" ".join(lines))
    natural_finds = [f for f in finds if f["trench"] == 3 and f["date"] == natural_day]
    if not natural_finds:
        ctx = contexts[3]
        finds.append(
            dict(
                sf=f"SF{sf:03d}",
                date=natural_day,
                ctx=ctx,
                trench=3,
                material="shale",
                object="bracelet fragment",
                by=staff[0],
            )
        )
        natural_finds = finds[-1:]
    finds.sort(key=lambda f: (f["date"], f["sf"]))
    key = natural_finds[0]
    assert len(natural_finds) == 1
    register = (
        "Holm Barrow 2023 - Small Finds Register\nsmall find | date found | context | material | object | found by\n"
        + "\n".join(
            f"{f['sf']} | {f['date']:%d/%m/%Y} | {f['ctx']} | {f['material']} | {f['object']} | {f['by']}"
            for f in finds
        )
    )
    return Sample(
        "excavation",
        "Research",
        ["Field diary", "Small finds register"],
        ["\n".join(diary), register],
        [
            (
                "On the day the field diary says Trench 3 first reached natural subsoil, one small find was registered from "
                "Trench 3. Which small find was it, and what is it made of?",
                f"{key['sf']}, a {key['object']} of {key['material']}",
            )
        ],
    )


# ----- F: a council's procurement minutes and a supplier audit -------------------------------------------

SUPPLIERS = [
    "Brackenridge Surfacing Ltd",
    "Coldharbour Civils",
    "Marlow & Pike Contracting",
    "Redfern Highways",
    "Stonegate Infrastructure",
    "Westmarch Paving Co.",
]
PROJECTS = [
    "Kingsmead footbridge repainting",
    "Market Square drainage renewal",
    "Northfield cycle lane",
    "Riverside Road resurfacing",
    "Station Approach junction signals",
    "Mill Lane culvert replacement",
    "Riverside Park footpath lighting",
    "Church Street resurfacing",
    "Harbour Road retaining wall repairs",
    "Town Centre winter gritting depot extension",
]
OTHER_ITEMS = [
    "The committee noted the quarterly contracts register, which lists {n} live contracts with a combined value of {v}.",
    "The committee noted the spend analysis for the previous quarter: {p}% of spend went to suppliers within the county.",
    "The committee received an update on the social value policy; bidders will be asked for apprenticeship commitments "
    "on contracts above {v}.",
    "The Procurement Manager reported that the framework for reactive highway repairs expires in {n} months and that "
    "market engagement will begin in the autumn.",
    "Members asked for a report on late payment to small suppliers; {p}% of invoices were paid within 30 days last quarter.",
    "The committee agreed a waiver of standing orders for the emergency tree works after the storm, valued at {v}.",
]


def procurement(rng: random.Random) -> Sample:
    members = people(rng, 7)
    officer, auditor = people(rng, 2)
    awards = {}
    minutes = ["Ashcombe District Council - Contracts and Procurement Committee, Minutes 2023"]
    register = []
    for m, when in enumerate(
        ["8 March 2023", "12 April 2023", "10 May 2023", "14 June 2023", "12 July 2023"]
    ):
        present = rng.sample(members[1:], 4)
        absent = [x for x in members if x not in present and x != members[0]]
        items = [
            f"Apologies were received from Councillor {rng.choice(absent)}. No declarations of interest were made."
        ]
        for project in PROJECTS[m * 2 : m * 2 + 2]:
            bids = rng.sample(SUPPLIERS, rng.randint(3, 4))
            prices = [rng.randint(180, 900) * 1000 for _ in bids]
            quality = [rng.randint(55, 92) for _ in bids]
            low = min(prices)
            scores = [60 * low / p + 0.4 * q for p, q in zip(prices, quality, strict=True)]
            ranked = sorted(zip(scores, bids, prices, quality, strict=True), reverse=True)
            winner, price = ranked[0][1], ranked[0][2]
            awards[project] = winner
            register.append((project, winner, price, when))
            items.append(
                f"Tender for the {project}. {officer}, Procurement Manager, reported {len(bids)} compliant bids, "
                f"evaluated on 60% price and 40% quality: "
                + "; ".join(
                    f"{b} at {money(p)} (quality {q}/100, total score {sc:.1f})" for sc, b, p, q in ranked
                )
                + f". Members asked about the delivery programme and were told that works would start within "
                f"{rng.randint(4, 12)} weeks of award. RESOLVED that the contract be awarded to {winner} "
                f"at {money(price)}."
            )
        for template in rng.sample(OTHER_ITEMS, 2):
            items.append(
                template.format(
                    n=rng.randint(9, 40), v=money(rng.randint(50, 400) * 1000), p=rng.randint(41, 88)
                )
            )
        items.append(
            f"Date of next meeting confirmed. The meeting closed at {rng.randint(8, 9)}:{rng.randint(10, 55)} p.m."
        )
        minutes.append(
            f"\nMeeting of {when}\nPresent: Councillors {', '.join([members[0], *present])} (chair "
            f"{members[0]}). Officers: {officer}, Procurement Manager; a legal adviser.\n"
            + "\n".join(f"{i + 1}. {t}" for i, t in enumerate(items))
        )
    ratings = {
        s: rng.choice(["Satisfactory", "Requires improvement", "Good", "Unsatisfactory"]) for s in SUPPLIERS
    }
    target = awards["Riverside Road resurfacing"]
    ratings[target] = "Requires improvement"
    audit = [
        f"Ashcombe District Council - Internal Audit of Highways Suppliers, September 2023\nLead auditor: {auditor}. "
        "Scope: health and safety, quality management, invoicing accuracy and subcontractor control for each "
        "supplier holding a current highways contract.",
        "Background. The council spends about a third of its capital programme with a small group of highways "
        "contractors. The audit plan for 2023/24, agreed by the Audit and Governance Committee, included a review "
        "of how well those contractors meet the obligations in their contracts, following two complaints in 2022 "
        "about the standard of reinstatement after utility works.",
        "Approach. For each supplier the auditors sampled completed and live jobs from the contracts register, "
        "visited at least one live site unannounced, and compared invoices with the schedule of rates. Each "
        "supplier's overall rating is one of Good, Satisfactory, Requires improvement or Unsatisfactory. A rating "
        "of Requires improvement means that the supplier will be monitored monthly until the actions are closed; "
        "Unsatisfactory means that the supplier is suspended from new call-offs pending a review by the committee.",
        "Detailed findings by supplier follow.",
    ]
    for s in SUPPLIERS:
        findings = rng.sample(
            [
                "Method statements were signed before the work started in every sampled job.",
                "Two invoices charged for materials above the framework rates.",
                "Toolbox talk records were incomplete for night shifts.",
                "Subcontractor insurance certificates had lapsed for one firm.",
                "Material test certificates were filed for every sampled delivery.",
                "The quality plan had not been updated since 2019.",
                "Traffic management plans were approved by a competent person in every case.",
                "Core samples of new surfacing met the specified thickness at every test point.",
                "Daywork sheets were countersigned by the council's supervisor in all but one case.",
                "The accident book recorded one minor injury, investigated and closed.",
                "Waste transfer notes were missing for two skip collections.",
            ],
            5,
        )
        audit.append(
            f"\n{s}\nJobs sampled: {rng.randint(4, 9)}. Findings: "
            + " ".join(findings)
            + f"\nManagement response: {rng.choice(['accepted in full, actions due by December.', 'accepted; the supplier disputes the invoicing finding.', 'accepted, with a revised quality plan promised within 60 days.'])}"
            + f"\nOverall rating: {ratings[s]}."
        )
    for year in (2019, 2020, 2021, 2022):
        for project in rng.sample(PROJECTS, 4):
            register.append(
                (
                    project,
                    rng.choice(SUPPLIERS),
                    rng.randint(120, 700) * 1000,
                    f"{rng.randint(1, 28)} "
                    f"{rng.choice(['January', 'March', 'June', 'September', 'November'])} {year}",
                )
            )
    register.sort(key=lambda r: datetime.strptime(r[3], "%d %B %Y"))
    register_doc = (
        "Ashcombe District Council - Register of Highways and Public Realm Contracts (extract, July 2023)\n"
        "contract | contractor | value at award | date of award | status\n"
        + "\n".join(
            f"{p} | {w} | {money(v)} | {d} | {'live' if d.endswith('2023') else 'completed'}"
            for p, w, v, d in register
        )
    )
    return Sample(
        "procurement",
        "Government",
        ["Committee minutes", "Contracts register", "Supplier audit"],
        ["\n".join(minutes), register_doc, "\n".join(audit)],
        [
            (
                "Which supplier won the 2023 contract for the Riverside Road resurfacing, and what overall rating did that "
                "supplier receive in the September internal audit?",
                f"{target}, rated {ratings[target]}",
            )
        ],
    )


BUILDERS = [water_district, software_ops, clinical_trial, wind_farm, excavation, procurement]


def prompt(sample: Sample, question: str) -> str:
    docs = "\n\n".join(
        f"BEGIN DOCUMENT {i}: {title}\n{text}\nEND DOCUMENT {i}"
        for i, (title, text) in enumerate(zip(sample.titles, sample.documents, strict=True), start=1)
    )
    return (
        f"BEGIN INPUT DOCUMENTS\n\n{docs}\n\nEND INPUT DOCUMENTS\n\nAnswer the question below from the documents "
        f"above. Keep the final answer short.\n\nBEGIN QUESTION\n\n{question}\n\nEND QUESTION\n"
    )


def rows() -> list[dict]:
    out = []
    for seed, build in enumerate(BUILDERS):
        sample = build(random.Random(1000 + seed))
        for number, (question, answer) in enumerate(sample.questions, start=1):
            out.append(
                {
                    "responses_create_params": {
                        "input": [{"role": "user", "content": prompt(sample, question)}]
                    },
                    "id": f"lc-{sample.set_id}-{number}",
                    "document_category": sample.category,
                    "document_set_id": sample.set_id,
                    "question": question,
                    "answer": answer,
                    "data_source_filenames": ";".join(
                        f"{sample.set_id}_{i}.txt" for i in range(1, len(sample.documents) + 1)
                    ),
                }
            )
    return out


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    data = rows()
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data), encoding="utf-8")
    for r in data:
        words = len(r["responses_create_params"]["input"][0]["content"].split())
        print(f"{r['id']:28s} {words:6d} words  answer: {r['answer']}")


if __name__ == "__main__":
    main()
