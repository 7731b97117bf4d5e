"""The company directory tool: look up colleagues' email addresses by (part of) their name."""

from __future__ import annotations

from cascade_envs.tools import ToolError

from .common import contains, workplace_tool
from .tables import Workplace


@workplace_tool
def company_directory_find_email_address(db: Workplace, name: str = "") -> list[str]:
    """List the company email addresses that contain a name or part of one (any case).

    Args:
        name: The name, or a fragment of it, to look for in the addresses.
    """
    if not name:
        raise ToolError("Name not provided.")
    return [address for address in db.directory if contains(address, name)]


TOOLS = (company_directory_find_email_address,)
