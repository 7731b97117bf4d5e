"""Calendar tools: read, search, create, update and delete events.

Semantics of NeMo Gym's workplace_assistant: event ids are 8 digits; a search matches events
whose name or participant address contains the query (any case; an empty query matches all),
bounded by the *start* time (``time_min <= event_start <= time_max``, a bare date meaning
midnight), newest first, in pages. New events get the next 8-digit id; participant addresses are
stored in lower case; start times and durations are checked, then stored as given. The
meeting-hours rule of the system prompt is the model's to respect, not the tools'.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cascade_envs.tools import ToolError

from .common import contains, field_of, find_row, paginate, parse_datetime, require, workplace_tool
from .tables import Workplace

TABLE = "calendar"
NOT_FOUND = "Event not found."
READABLE = ("event_id", "event_name", "participant_email", "event_start", "duration")
UPDATABLE = ("event_name", "participant_email", "event_start", "duration")
START_FORMAT = "Invalid event_start format. Expected YYYY-MM-DD HH:MM:SS."


@workplace_tool
def calendar_get_event_information_by_id(db: Workplace, event_id: str, field: str) -> dict[str, Any]:
    """Return one field of a calendar event.

    Args:
        event_id: The event's 8-digit id.
        field: The field to return: 'event_id', 'event_name', 'participant_email', 'event_start'
            or 'duration'.
    """
    require(event_id, message="Event ID not provided.")
    require(field, message="Field not provided.")
    _check_id(event_id)
    if field not in READABLE:
        raise ToolError(f"Invalid field. Available fields are: {', '.join(READABLE)}")
    return field_of(find_row(db, TABLE, event_id, NOT_FOUND), field, "Field not found.")


@workplace_tool
def calendar_search_events(
    db: Workplace, query: str = "", time_min: str = "", time_max: str = "", page: int = 1, page_size: int = 5
) -> dict[str, Any] | str:
    """Find events whose name or participant contains a query, latest start first.

    Args:
        query: Text to look for in the event name or the participant's address (any case).
        time_min: Earliest start, inclusive (YYYY-MM-DD HH:MM:SS).
        time_max: Latest start, inclusive (YYYY-MM-DD HH:MM:SS).
        page: Which page of results to return, from 1.
        page_size: How many events a page holds.
    """
    low = (
        parse_datetime(time_min, "Invalid time_min format. Expected YYYY-MM-DD HH:MM:SS.")
        if time_min
        else None
    )
    high = (
        parse_datetime(time_max, "Invalid time_max format. Expected YYYY-MM-DD HH:MM:SS.")
        if time_max
        else None
    )
    found = []
    for row in db[TABLE]:
        if query and not (contains(row["event_name"], query) or contains(row["participant_email"], query)):
            continue
        start = _start(row)
        if (low is not None or high is not None) and (
            start is None or (low is not None and start < low) or (high is not None and start > high)
        ):
            continue
        found.append((start or datetime.min, dict(row)))
    if not found:
        return "No events found."
    found.sort(key=lambda pair: pair[0], reverse=True)
    return paginate([row for _, row in found], "event", page, page_size)


@workplace_tool(writes=True)
def calendar_create_event(
    db: Workplace, event_name: str, participant_email: str, event_start: str, duration: str
) -> str:
    """Create a calendar event and return its id.

    Args:
        event_name: The event's name.
        participant_email: The participant's email address.
        event_start: When it starts (YYYY-MM-DD HH:MM:SS).
        duration: How long it lasts, in minutes.
    """
    require(event_name, message="Event name not provided.")
    require(participant_email, message="Participant email not provided.")
    require(event_start, message="Event start not provided.")
    require(duration, message="Event duration not provided.")
    parse_datetime(event_start, START_FORMAT)
    _check_duration(duration)
    table = db[TABLE]
    return table.insert(
        {
            "event_id": table.next_id(),
            "event_name": event_name,
            "participant_email": participant_email.lower(),
            "event_start": event_start,
            "duration": duration,
        }
    )


@workplace_tool(writes=True)
def calendar_delete_event(db: Workplace, event_id: str) -> str:
    """Delete a calendar event.

    Args:
        event_id: The 8-digit id of the event to delete.
    """
    require(event_id, message="Event ID not provided.")
    _check_id(event_id)
    find_row(db, TABLE, event_id, NOT_FOUND)
    db[TABLE].delete(event_id)
    return "Event deleted successfully."


@workplace_tool(writes=True)
def calendar_update_event(db: Workplace, event_id: str, field: str, new_value: str) -> str:
    """Change one field of a calendar event.

    Args:
        event_id: The 8-digit id of the event.
        field: The field to change: 'event_name', 'participant_email', 'event_start' or 'duration'.
        new_value: Its new value.
    """
    require(event_id, field, new_value, message="Event ID, field, or new value not provided.")
    _check_id(event_id)
    if field not in UPDATABLE:
        raise ToolError(f"Invalid field. Available fields are: {', '.join(UPDATABLE)}")
    if field == "event_start":
        parse_datetime(new_value, START_FORMAT)
    elif field == "duration":
        _check_duration(new_value)
    elif field == "participant_email":
        new_value = new_value.lower()
    find_row(db, TABLE, event_id, NOT_FOUND)
    db[TABLE].update(event_id, field, new_value)
    return "Event updated successfully."


def _start(row: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(row["event_start"] or "")
    except ValueError:
        return None


def _check_id(event_id: str) -> None:
    if not (len(event_id) == 8 and event_id.isdigit()):
        raise ToolError("Invalid event ID format. Expected 8-digit ID.")


def _check_duration(duration: str) -> None:
    try:
        minutes = int(duration)
    except ValueError:
        raise ToolError("Invalid duration format. Expected a number of minutes.") from None
    if minutes <= 0:
        raise ToolError("Duration must be a positive number of minutes.")


TOOLS = (
    calendar_get_event_information_by_id,
    calendar_search_events,
    calendar_create_event,
    calendar_delete_event,
    calendar_update_event,
)
