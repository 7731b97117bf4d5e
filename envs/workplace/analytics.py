"""Website analytics tools: visitor records, daily counts and averages, and plots.

Semantics of NeMo Gym's workplace_assistant: the counts are per day (``{date: value}``, dates in
order) over the visits whose ``date_of_visit`` lies in ``[time_min, time_max]``, compared as text
(the dates are ``YYYY-MM-DD``); a traffic-source count lists every day of the range, zero where
no visit came from that source. ``analytics_create_plot`` checks only what to plot and how,
records the plot's file path (``plots/<time_min>_<time_max>_<value>_<type>.png``) in the
``plots`` table, and returns it: the plot is the state change these tasks are scored on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from cascade_envs.tools import ToolError

from .common import require, workplace_tool
from .tables import PLOTS, Row, Workplace

TABLE = "analytics"
PLOT_VALUES = (
    "total_visits",
    "session_duration_seconds",
    "user_engaged",
    "visits_direct",
    "visits_referral",
    "visits_search_engine",
    "visits_social_media",
)
PLOT_TYPES = ("bar", "line", "scatter", "histogram")


@workplace_tool
def analytics_get_visitor_information_by_id(db: Workplace, visitor_id: str) -> list[dict[str, Any]]:
    """Return every recorded visit of a visitor.

    Args:
        visitor_id: The visitor's id.
    """
    require(visitor_id, message="Visitor ID not provided.")
    visits = [dict(row) for row in db[TABLE] if row["visitor_id"] == visitor_id]
    if not visits:
        raise ToolError("Visitor not found.")
    return visits


@workplace_tool(writes=True)
def analytics_create_plot(
    db: Workplace, time_min: str, time_max: str, value_to_plot: str, plot_type: str
) -> str:
    """Plot an analytics value over a date range and return the plot's file path.

    Args:
        time_min: First day of the range (YYYY-MM-DD).
        time_max: Last day of the range (YYYY-MM-DD).
        value_to_plot: What to plot: 'total_visits', 'session_duration_seconds', 'user_engaged',
            'visits_direct', 'visits_referral', 'visits_search_engine' or 'visits_social_media'.
        plot_type: The kind of plot: 'bar', 'line', 'scatter' or 'histogram'.
    """
    require(time_min, message="Start date not provided.")
    require(time_max, message="End date not provided.")
    if value_to_plot not in PLOT_VALUES:
        raise ToolError(f"Value to plot must be one of {_listed(PLOT_VALUES)}")
    if plot_type not in PLOT_TYPES:
        raise ToolError(f"Plot type must be one of {_listed(PLOT_TYPES)}")
    path = f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"
    db[PLOTS].insert({"file_path": path})
    return path


@workplace_tool
def analytics_total_visits_count(db: Workplace, time_min: str = "", time_max: str = "") -> dict[str, int]:
    """Count the visits of each day in a date range.

    Args:
        time_min: First day of the range (YYYY-MM-DD); no lower bound when empty.
        time_max: Last day of the range (YYYY-MM-DD); no upper bound when empty.
    """
    return _per_day(_visits(db, time_min, time_max), lambda rows: len(rows))


@workplace_tool
def analytics_engaged_users_count(db: Workplace, time_min: str = "", time_max: str = "") -> dict[str, int]:
    """Count the engaged visitors of each day in a date range.

    Args:
        time_min: First day of the range (YYYY-MM-DD); no lower bound when empty.
        time_max: Last day of the range (YYYY-MM-DD); no upper bound when empty.
    """
    return _per_day(_visits(db, time_min, time_max), lambda rows: sum(bool(r["user_engaged"]) for r in rows))


@workplace_tool
def analytics_traffic_source_count(
    db: Workplace, time_min: str = "", time_max: str = "", traffic_source: str = ""
) -> dict[str, int]:
    """Count each day's visits from one traffic source (or from all sources when none is given).

    Args:
        time_min: First day of the range (YYYY-MM-DD); no lower bound when empty.
        time_max: Last day of the range (YYYY-MM-DD); no upper bound when empty.
        traffic_source: 'direct', 'referral', 'search engine' or 'social media'.
    """
    visits = _visits(db, time_min, time_max)
    if not traffic_source:
        return _per_day(visits, lambda rows: len(rows))
    return _per_day(visits, lambda rows: sum(r["traffic_source"] == traffic_source for r in rows))


@workplace_tool
def analytics_get_average_session_duration(
    db: Workplace, time_min: str = "", time_max: str = ""
) -> dict[str, float]:
    """Average the session duration (seconds) of each day in a date range.

    Args:
        time_min: First day of the range (YYYY-MM-DD); no lower bound when empty.
        time_max: Last day of the range (YYYY-MM-DD); no upper bound when empty.
    """
    return _per_day(_visits(db, time_min, time_max), _mean_duration)


def _visits(db: Workplace, time_min: str, time_max: str) -> list[Row]:
    return [
        row
        for row in db[TABLE]
        if (not time_min or (row["date_of_visit"] or "") >= time_min)
        and (not time_max or (row["date_of_visit"] or "") <= time_max)
    ]


def _per_day(visits: Iterable[Row], value: Callable[[list[Row]], Any]) -> dict[str, Any]:
    days: dict[str, list[Row]] = defaultdict(list)
    for row in visits:
        if row["date_of_visit"]:
            days[row["date_of_visit"]].append(row)
    return {day: value(days[day]) for day in sorted(days)}


def _mean_duration(rows: list[Row]) -> float:
    try:
        return sum(float(r["session_duration_seconds"]) for r in rows) / len(rows)
    except (TypeError, ValueError):
        raise ToolError("the analytics table holds a session duration that is not a number") from None


def _listed(options: tuple[str, ...]) -> str:
    return ", ".join(f"'{o}'" for o in options[:-1]) + f" or '{options[-1]}'"


TOOLS = (
    analytics_get_visitor_information_by_id,
    analytics_create_plot,
    analytics_total_visits_count,
    analytics_engaged_users_count,
    analytics_traffic_source_count,
    analytics_get_average_session_duration,
)
