"""Customer relationship manager tools: search, add, update and delete customers.

Semantics of NeMo Gym's workplace_assistant: a search needs at least one filter; text filters are
contained in their field (any case); date bounds compare the stored ``YYYY-MM-DD HH:MM:SS`` text
with the given text, so ``last_contact_date_max="2023-11-09"`` excludes contacts later on
2023-11-09 itself (NeMo Gym's behaviour, kept so that searches return what its tasks expect);
results come in table order, in pages. Statuses and product interests are checked on update
(not on add, as in NeMo Gym); email addresses are stored in lower case; new customers get the next
8-digit id. Unlike NeMo Gym, ``customer_id`` itself cannot be updated (ids identify rows).
"""

from __future__ import annotations

from typing import Any

from cascade_envs.tools import ToolError

from .common import contains, paginate, require, workplace_tool
from .tables import Workplace

TABLE = "customer_relationship_manager"
STATUSES = ("Qualified", "Won", "Lost", "Lead", "Proposal")
PRODUCTS = ("Software", "Hardware", "Services", "Consulting", "Training")
UPDATABLE = (
    "customer_name",
    "assigned_to_email",
    "customer_email",
    "customer_phone",
    "last_contact_date",
    "product_interest",
    "status",
    "notes",
    "follow_up_by",
)
LOWER_CASE = ("customer_email", "assigned_to_email")


@workplace_tool
def customer_relationship_manager_search_customers(
    db: Workplace,
    customer_name: str = "",
    customer_email: str = "",
    product_interest: str = "",
    status: str = "",
    assigned_to_email: str = "",
    last_contact_date_min: str = "",
    last_contact_date_max: str = "",
    follow_up_by_min: str = "",
    follow_up_by_max: str = "",
    page: int = 1,
    page_size: int = 5,
) -> dict[str, Any] | str:
    """Find the customers that match every filter given (at least one), in pages.

    Args:
        customer_name: Text the customer's name contains.
        customer_email: Text the customer's email address contains.
        product_interest: The product the customer is interested in.
        status: The customer's stage: 'Qualified', 'Won', 'Lost', 'Lead' or 'Proposal'.
        assigned_to_email: The email address of the colleague who handles the customer.
        last_contact_date_min: Earliest last contact (YYYY-MM-DD).
        last_contact_date_max: Latest last contact (YYYY-MM-DD).
        follow_up_by_min: Earliest follow-up date (YYYY-MM-DD).
        follow_up_by_max: Latest follow-up date (YYYY-MM-DD).
        page: Which page of results to return, from 1.
        page_size: How many customers a page holds.
    """
    texts = {
        "customer_name": customer_name,
        "customer_email": customer_email,
        "product_interest": product_interest,
        "status": status,
        "assigned_to_email": assigned_to_email,
    }
    bounds = [
        ("last_contact_date", last_contact_date_min, last_contact_date_max),
        ("follow_up_by", follow_up_by_min, follow_up_by_max),
    ]
    if not any(texts.values()) and not any(low or high for _, low, high in bounds):
        raise ToolError("No search parameters provided. Please provide at least one parameter.")
    found = [
        dict(row)
        for row in db[TABLE]
        if all(contains(row[field], text) for field, text in texts.items() if text)
        and all(_within(row[field], low, high) for field, low, high in bounds)
    ]
    if not found:
        return "No customers found."
    return paginate(found, "customer", page, page_size)


@workplace_tool(writes=True)
def customer_relationship_manager_update_customer(
    db: Workplace, customer_id: str, field: str, new_value: str
) -> str:
    """Change one field of a customer record.

    Args:
        customer_id: The customer's id.
        field: The field to change: 'customer_name', 'assigned_to_email', 'customer_email',
            'customer_phone', 'last_contact_date', 'product_interest', 'status', 'notes' or 'follow_up_by'.
        new_value: Its new value.
    """
    require(customer_id, field, new_value, message="Customer ID, field, or new value not provided.")
    if field == "status" and new_value not in STATUSES:
        raise ToolError(f"Status not valid. Please choose from: {_listed(STATUSES)}")
    if field == "product_interest" and new_value not in PRODUCTS:
        raise ToolError(f"Product interest not valid. Please choose from: {_listed(PRODUCTS)}")
    if field in LOWER_CASE:
        new_value = new_value.lower()
    if customer_id not in db[TABLE]:
        raise ToolError("Customer not found.")
    if field not in UPDATABLE or field not in db[TABLE].columns:
        raise ToolError(f"Field not valid. Please choose from: {_listed(UPDATABLE)}")
    db[TABLE].update(customer_id, field, new_value)
    return "Customer updated successfully."


@workplace_tool(writes=True)
def customer_relationship_manager_add_customer(
    db: Workplace,
    customer_name: str,
    assigned_to_email: str,
    status: str,
    customer_email: str = "",
    customer_phone: str = "",
    last_contact_date: str = "",
    product_interest: str = "",
    notes: str = "",
    follow_up_by: str = "",
) -> str:
    """Add a customer record and return its id.

    Args:
        customer_name: The customer's name.
        assigned_to_email: The email address of the colleague who will handle the customer.
        status: The customer's stage: 'Qualified', 'Won', 'Lost', 'Lead' or 'Proposal'.
        customer_email: The customer's email address.
        customer_phone: The customer's phone number.
        last_contact_date: When the customer was last contacted (YYYY-MM-DD).
        product_interest: The product the customer is interested in: 'Software', 'Hardware',
            'Services', 'Consulting' or 'Training'.
        notes: Free-text notes about the customer.
        follow_up_by: When to follow up next (YYYY-MM-DD).
    """
    require(
        customer_name,
        assigned_to_email,
        status,
        message="Please provide all required fields: customer_name, assigned_to_email, status.",
    )
    table = db[TABLE]
    values = {
        "customer_id": table.next_id(),
        "customer_name": customer_name,
        "assigned_to_email": assigned_to_email.lower(),
        "status": status,
        "customer_email": customer_email.lower(),
        "customer_phone": customer_phone,
        "last_contact_date": last_contact_date,
        "product_interest": product_interest,
        "notes": notes,
        "follow_up_by": follow_up_by,
    }
    return table.insert({column: value or None for column, value in values.items()})


@workplace_tool(writes=True)
def customer_relationship_manager_delete_customer(db: Workplace, customer_id: str) -> str:
    """Delete a customer record.

    Args:
        customer_id: The id of the customer to delete.
    """
    require(customer_id, message="Customer ID not provided.")
    if customer_id not in db[TABLE]:
        raise ToolError("Customer not found.")
    db[TABLE].delete(customer_id)
    return "Customer deleted successfully."


def _within(value: Any, low: str, high: str) -> bool:
    if not (low or high):
        return True
    return isinstance(value, str) and (not low or value >= low) and (not high or value <= high)


def _listed(options: tuple[str, ...]) -> str:
    return ", ".join(f"'{o}'" for o in options)


TOOLS = (
    customer_relationship_manager_search_customers,
    customer_relationship_manager_update_customer,
    customer_relationship_manager_add_customer,
    customer_relationship_manager_delete_customer,
)
