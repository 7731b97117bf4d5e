"""Project management tools: read, search, create, update and delete tasks on the team's boards.

Semantics of NeMo Gym's workplace_assistant: a search needs at least one filter and returns every
matching task in table order (no pages; the table bounds it): the assignee must match exactly
(any case), the other filters are contained in their field (any case). Lists, boards and
assignees are checked against fixed sets: ``LISTS``, ``BOARDS`` and the team, i.e. the addresses
the table already assigns tasks to. New tasks get the next 8-digit id; assignees are stored in
lower case. Unlike NeMo Gym, ``task_id`` itself cannot be updated (ids identify rows).
"""

from __future__ import annotations

import re
from typing import Any

from cascade_envs.tools import ToolError

from .common import contains, field_of, find_row, require, workplace_tool
from .tables import Workplace

TABLE = "project_management"
NOT_FOUND = "Task not found."
LISTS = ("Backlog", "In Progress", "In Review", "Completed")
BOARDS = ("Back end", "Front end", "Design")
_ADDRESS = re.compile(r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$")


@workplace_tool
def project_management_get_task_information_by_id(db: Workplace, task_id: str, field: str) -> dict[str, Any]:
    """Return one field of a task.

    Args:
        task_id: The task's 8-digit id.
        field: The field to return: 'task_id', 'task_name', 'assigned_to_email', 'list_name',
            'due_date' or 'board'.
    """
    require(task_id, message="Task ID not provided.")
    require(field, message="Field not provided.")
    return field_of(find_row(db, TABLE, task_id, NOT_FOUND), field, "Field not found.")


@workplace_tool
def project_management_search_tasks(
    db: Workplace,
    task_name: str = "",
    assigned_to_email: str = "",
    list_name: str = "",
    due_date: str = "",
    board: str = "",
) -> list[dict[str, Any]]:
    """Find the tasks that match every filter given (at least one).

    Args:
        task_name: Text the task's name contains.
        assigned_to_email: The assignee's email address (exact, any case).
        list_name: The list: 'Backlog', 'In Progress', 'In Review' or 'Completed'.
        due_date: The due date (YYYY-MM-DD), or part of it.
        board: The board: 'Back end', 'Front end' or 'Design'.
    """
    if not any((task_name, assigned_to_email, list_name, due_date, board)):
        raise ToolError("No search parameters provided.")
    if assigned_to_email and not _ADDRESS.match(assigned_to_email):
        raise ToolError("Invalid email format for assigned_to_email.")
    wanted = {"task_name": task_name, "list_name": list_name, "due_date": due_date, "board": board}
    assignee = assigned_to_email.lower()
    return [
        dict(row)
        for row in db[TABLE]
        if all(contains(row[field], text) for field, text in wanted.items() if text)
        and (not assignee or (row["assigned_to_email"] or "").lower() == assignee)
    ]


@workplace_tool(writes=True)
def project_management_create_task(
    db: Workplace, task_name: str, assigned_to_email: str, list_name: str, due_date: str, board: str
) -> str:
    """Create a task and return its id.

    Args:
        task_name: The task's name.
        assigned_to_email: The email address of the team member who will do it.
        list_name: Its list: 'Backlog', 'In Progress', 'In Review' or 'Completed'.
        due_date: When it is due (YYYY-MM-DD).
        board: Its board: 'Back end', 'Front end' or 'Design'.
    """
    require(task_name, assigned_to_email, list_name, due_date, board, message="Missing task details.")
    assignee = assigned_to_email.lower()
    _check_assignee(db, assignee)
    _check_choice(list_name, LISTS, "List")
    _check_choice(board, BOARDS, "Board")
    table = db[TABLE]
    return table.insert(
        {
            "task_id": table.next_id(),
            "task_name": task_name,
            "assigned_to_email": assignee,
            "list_name": list_name,
            "due_date": due_date,
            "board": board,
        }
    )


@workplace_tool(writes=True)
def project_management_delete_task(db: Workplace, task_id: str) -> str:
    """Delete a task.

    Args:
        task_id: The 8-digit id of the task to delete.
    """
    require(task_id, message="Task ID not provided.")
    find_row(db, TABLE, task_id, NOT_FOUND)
    db[TABLE].delete(task_id)
    return "Task deleted successfully."


@workplace_tool(writes=True)
def project_management_update_task(db: Workplace, task_id: str, field: str, new_value: str) -> str:
    """Change one field of a task.

    Args:
        task_id: The 8-digit id of the task.
        field: The field to change: 'task_name', 'assigned_to_email', 'list_name', 'due_date' or 'board'.
        new_value: Its new value.
    """
    require(task_id, field, new_value, message="Task ID, field, or new value not provided.")
    if field == "assigned_to_email":
        new_value = new_value.lower()
        _check_assignee(db, new_value)
    elif field == "board":
        _check_choice(new_value, BOARDS, "Board")
    elif field == "list_name":
        _check_choice(new_value, LISTS, "List")
    find_row(db, TABLE, task_id, NOT_FOUND)
    if field not in db[TABLE].columns or field == "task_id":
        raise ToolError("Field not valid.")
    db[TABLE].update(task_id, field, new_value)
    return "Task updated successfully."


def _check_assignee(db: Workplace, address: str) -> None:
    if not any((row["assigned_to_email"] or "").lower() == address for row in db[TABLE]):
        raise ToolError("Assignee email not valid. Please choose from the list of team members.")


def _check_choice(value: str, choices: tuple[str, ...], what: str) -> None:
    if value not in choices:
        listed = ", ".join(f"'{c}'" for c in choices)
        raise ToolError(f"{what} not valid. Please choose from: {listed}.")


TOOLS = (
    project_management_get_task_information_by_id,
    project_management_search_tasks,
    project_management_create_task,
    project_management_delete_task,
    project_management_update_task,
)
