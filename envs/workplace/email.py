"""Email tools: read, search, send, forward, reply to and delete the user's emails.

Semantics of NeMo Gym's workplace_assistant (read there, written here): a search matches an email
when every word of the query occurs in its subject, body or address (any case), newest first, in
pages; its date bounds compare calendar days, both inclusive. Sent mail goes to the outbox,
addressed in lower case, stamped with the episode's clock and given the next id (not
zero-padded, as NeMo Gym does); replies and forwards prefix the subject with ``RE: ``/``FW: ``.
``sent_datetime`` values are ``YYYY-MM-DD HH:MM:SS`` text, so they sort as text.
"""

from __future__ import annotations

from typing import Any

from cascade_envs.tools import ToolError

from .common import field_of, find_row, paginate, parse_datetime, require, workplace_tool
from .tables import Workplace

TABLE = "email"
NOT_FOUND = "Email not found."


@workplace_tool
def email_get_email_information_by_id(db: Workplace, email_id: str, field: str) -> dict[str, Any]:
    """Return one field of an email.

    Args:
        email_id: The email's id.
        field: The field to return: 'email_id', 'inbox/outbox', 'sender/recipient', 'subject',
            'sent_datetime' or 'body'.
    """
    require(email_id, message="Email ID not provided.")
    require(field, message="Field not provided.")
    row = find_row(db, TABLE, email_id, NOT_FOUND)
    return field_of(row, field, f"Field '{field}' not found. Available fields: {', '.join(row)}")


@workplace_tool
def email_search_emails(
    db: Workplace, query: str = "", date_min: str = "", date_max: str = "", page: int = 1, page_size: int = 5
) -> dict[str, Any] | str:
    """Find emails whose subject, body or address contain every word of a query, newest first.

    Args:
        query: Words to look for (all must occur, in any of the three fields, any case).
        date_min: Earliest day sent, inclusive (YYYY-MM-DD).
        date_max: Latest day sent, inclusive (YYYY-MM-DD).
        page: Which page of results to return, from 1.
        page_size: How many emails a page holds.
    """
    words = list(dict.fromkeys(query.lower().split()))
    low = _day(date_min, "date_min") if date_min else None
    high = _day(date_max, "date_max") if date_max else None
    found = []
    for row in db[TABLE]:
        text = f"{row['subject']} {row['body']} {row['sender/recipient']}".lower()
        day = (row["sent_datetime"] or "")[:10]
        if all(w in text for w in words) and (low is None or day >= low) and (high is None or day <= high):
            found.append(dict(row))
    if not found:
        return "No emails found."
    found.sort(key=lambda row: row["sent_datetime"] or "", reverse=True)
    return paginate(found, "email", page, page_size)


@workplace_tool(writes=True)
def email_send_email(db: Workplace, recipient: str, subject: str, body: str) -> str:
    """Send an email.

    Args:
        recipient: The recipient's email address.
        subject: The subject line.
        body: The text of the email.
    """
    require(recipient, subject, body, message="Recipient, subject, or body not provided.")
    _send(db, recipient, subject, body)
    return "Email sent successfully."


@workplace_tool(writes=True)
def email_delete_email(db: Workplace, email_id: str) -> str:
    """Delete an email.

    Args:
        email_id: The id of the email to delete.
    """
    require(email_id, message="Email ID not provided.")
    find_row(db, TABLE, email_id, NOT_FOUND)
    db[TABLE].delete(email_id)
    return "Email deleted successfully."


@workplace_tool(writes=True)
def email_forward_email(db: Workplace, email_id: str, recipient: str) -> str:
    """Forward an email to someone.

    Args:
        email_id: The id of the email to forward.
        recipient: The email address to forward it to.
    """
    require(email_id, recipient, message="Email ID or recipient not provided.")
    _check_address(recipient)
    row = find_row(db, TABLE, email_id, NOT_FOUND)
    _send(db, recipient, f"FW: {row['subject']}", row["body"])
    return "Email forwarded successfully."


@workplace_tool(writes=True)
def email_reply_email(db: Workplace, email_id: str, body: str) -> str:
    """Reply to an email (to its sender, or for a sent email to its recipient).

    Args:
        email_id: The id of the email to reply to.
        body: The text of the reply.
    """
    require(email_id, body, message="Email ID or body not provided.")
    row = find_row(db, TABLE, email_id, NOT_FOUND)
    _send(db, row["sender/recipient"] or "", f"RE: {row['subject']}", body)
    return "Email replied successfully."


def _send(db: Workplace, recipient: str, subject: str | None, body: str | None) -> None:
    _check_address(recipient)
    table = db[TABLE]
    table.insert(
        {
            "email_id": table.next_id(),
            "inbox/outbox": "outbox",
            "sender/recipient": recipient.lower(),
            "subject": subject,
            "sent_datetime": db.timestamp,
            "body": body,
        }
    )


def _check_address(address: str) -> None:
    if "@" not in address or "." not in address:
        raise ToolError("Invalid recipient email address.")


def _day(text: str, name: str) -> str:
    return parse_datetime(text, f"Invalid {name}: expected a date as YYYY-MM-DD.").date().isoformat()


TOOLS = (
    email_get_email_information_by_id,
    email_search_emails,
    email_send_email,
    email_delete_email,
    email_forward_email,
    email_reply_email,
)
