"""Functions as tools: ``Tool``/``@tool``, and ``Toolbox`` dispatch with its error messages."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from cascade_envs.core import Completion
from cascade_envs.tools import (
    Tool,
    Toolbox,
    ToolCall,
    ToolError,
    ToolResult,
    ToolTurn,
    parse_xml_json_tool_calls,
    render_tools_prompt,
    tool,
    with_tools,
)


@dataclass
class Inbox:
    """A tiny in-memory email table, the kind of state an env injects into its tools."""

    emails: dict[str, dict[str, str]] = field(
        default_factory=lambda: {
            "00000001": {
                "sender": "carlos@atlas.tech",
                "subject": "Task update",
                "body": "Prototype done.",
                "sent": "2023-11-29",
            },
            "00000002": {
                "sender": "dana@atlas.tech",
                "subject": "Lunch",
                "body": "Friday?",
                "sent": "2023-11-30",
            },
        }
    )
    sent: list[dict[str, str]] = field(default_factory=list)


class Status(Enum):
    OPEN = "open"
    DONE = "done"


def email_get_email_information_by_id(email_id: str, field: str, *, db: Inbox) -> str:
    """Retrieve one field of an email.

    Args:
        email_id: Unique id of the email.
        field: Which field to return: sender, subject or body.
    """
    if email_id not in db.emails:
        raise ToolError(f"no email with id {email_id!r}")
    if field not in db.emails[email_id]:
        raise ToolError(f"unknown field {field!r}; use sender, subject or body")
    return db.emails[email_id][field]


def email_search_emails(
    query: str = "",
    date_min: str | None = None,
    date_max: str | None = None,
    page: int = 1,
    page_size: int = 5,
    *,
    db: Inbox,
) -> list[dict[str, str]]:
    """Search emails whose subject or body contain the query, sent between the dates (YYYY-MM-DD)."""
    found = [
        {"email_id": k, **v}
        for k, v in db.emails.items()
        if query.lower() in (v["subject"] + v["body"]).lower()
        and (date_min or "") <= v["sent"] <= (date_max or "9999")
    ]
    return found[(page - 1) * page_size : page * page_size]


def email_send_email(recipient: str, subject: str, body: str, *, db: Inbox) -> str:
    """Send an email."""
    db.sent.append({"recipient": recipient, "subject": subject, "body": body})
    return "Email sent successfully."


def set_status(task_id: str, status: Status, page: int = 1) -> dict[str, Any]:
    """Set a task's status."""
    return {
        "task_id": task_id,
        "status": status,
        "is_enum": isinstance(status, Status),
        "page": page,
        "page_type": type(page).__name__,
    }


def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


async def slow_lookup(key: str, delay: float = 0.0) -> str:
    """Look a key up in a slow service."""
    await asyncio.sleep(delay)
    return f"value of {key}"


async def flaky_service() -> str:
    """A service whose own client times out."""
    raise TimeoutError("upstream read timeout")


EMAIL_TOOLS = [email_get_email_information_by_id, email_search_emails, email_send_email]


def make_toolbox(**options: Any) -> Toolbox:
    tools = [Tool.from_function(fn, hidden=["db"]) for fn in EMAIL_TOOLS]
    return Toolbox([*tools, set_status, divide, slow_lookup, flaky_service], **options)


def call(toolbox: Toolbox, name: str, context: dict[str, Any] | None = None, **arguments: Any) -> ToolResult:
    return asyncio.run(toolbox.acall(ToolCall(name, arguments, id="call_7"), context))


# ----- Tool and @tool ---------------------------------------------------------------------------


def test_tool_from_function_and_its_spec():
    read = Tool.from_function(email_get_email_information_by_id, hidden=["db"])
    assert read.name == "email_get_email_information_by_id" and read.hidden == ("db",)
    assert read.spec == {
        "type": "function",
        "function": {
            "name": "email_get_email_information_by_id",
            "description": "Retrieve one field of an email.",
            "parameters": {
                "type": "object",
                "properties": {
                    "email_id": {"type": "string", "description": "Unique id of the email."},
                    "field": {
                        "type": "string",
                        "description": "Which field to return: sender, subject or body.",
                    },
                },
                "required": ["email_id", "field"],
                "additionalProperties": False,
            },
        },
    }
    assert read(email_id="00000002", field="subject", db=Inbox()) == "Lunch"  # still callable


def test_tool_decorator_bare_and_with_arguments():
    @tool
    def ping() -> str:
        """Check the service is up."""
        return "pong"

    @tool(name="lookup", description="Find a user.", hidden=["db"])
    def find_user(name: str, db: dict) -> str:
        return db[name]

    assert isinstance(ping, Tool) and ping() == "pong" and ping.description == "Check the service is up."
    assert ping.parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    assert find_user.name == "lookup" and find_user.description == "Find a user."
    assert list(find_user.parameters["properties"]) == ["name"]
    assert find_user("ann", {"ann": "ann@x.org"}) == "ann@x.org"


def test_overrides_replace_what_is_derived():
    schema = {
        "type": "object",
        "properties": {"when": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}},
        "required": ["when"],
    }

    def day_of_week(when: dt.date) -> str:  # dt.date has no JSON schema: parameters= describes it
        return "Thursday"

    described = Tool.from_function(day_of_week, parameters=schema, description="Weekday of a date.")
    assert described.parameters == schema and described.parameters is not schema
    assert described.description == "Weekday of a date."
    with pytest.raises(ValueError, match=r"parameter 'when'.*parameters="):
        Tool.from_function(day_of_week)
    with pytest.raises(ValueError, match=r"a tool name is 1-64"):
        Tool.from_function(lambda: 1)
    with pytest.raises(ValueError, match="type object"):
        Tool("t", "", {"type": "array"}, divide)


# ----- Toolbox ----------------------------------------------------------------------------------


def test_toolbox_lookup_and_specs():
    toolbox = make_toolbox()
    assert toolbox.names[:3] == (
        "email_get_email_information_by_id",
        "email_search_emails",
        "email_send_email",
    )
    assert len(toolbox) == 7 and "divide" in toolbox and "nope" not in toolbox
    assert toolbox["divide"].fn is divide and [t.name for t in toolbox] == list(toolbox.names)
    specs = toolbox.specs()
    assert [s["function"]["name"] for s in specs] == list(toolbox.names)
    prompt = with_tools([{"role": "user", "content": "Find Carlos's email."}], specs)[0]["content"]
    assert "<tools>" in prompt and '"name": "email_send_email"' in prompt and '"db"' not in prompt
    assert render_tools_prompt(specs) in prompt


def test_toolbox_refuses_bad_tool_sets():
    with pytest.raises(ValueError, match="two tools are named 'divide'"):
        Toolbox([divide, divide])
    leaky = Tool.from_function(
        email_send_email,
        hidden=["db"],
        parameters={"type": "object", "properties": {"recipient": {"type": "string"}, "db": {}}},
    )
    with pytest.raises(ValueError, match=r"announces hidden parameter\(s\) \['db'\]"):
        Toolbox([leaky])
    with pytest.raises(ValueError, match="'required' must be a list"):
        Toolbox([Tool("divide", "", {"type": "object", "required": "a"}, divide)])
    with pytest.raises(ValueError, match="'properties' must map"):
        Toolbox([Tool("divide", "", {"type": "object", "properties": {"a": "number"}}, divide)])
    with pytest.raises(ValueError, match="max_result_chars"):
        Toolbox([divide], max_result_chars=0)
    with pytest.raises(ValueError, match="timeout_s"):
        Toolbox([divide], timeout_s=0)


def test_a_call_runs_with_hidden_arguments_from_the_context():
    inbox = Inbox()
    toolbox = make_toolbox()
    result = call(
        toolbox, "email_get_email_information_by_id", {"db": inbox}, email_id="00000001", field="sender"
    )
    assert result.ok and result.content == "carlos@atlas.tech" and result.value == "carlos@atlas.tech"
    assert result.error is None and result.seconds >= 0
    sent = call(
        toolbox,
        "email_send_email",
        {"db": inbox, "other": 1},
        recipient="carlos@atlas.tech",
        subject="Re: Task update",
        body="Thanks!",
    )
    assert sent.ok and inbox.sent == [
        {"recipient": "carlos@atlas.tech", "subject": "Re: Task update", "body": "Thanks!"}
    ]


def test_the_policy_cannot_pass_a_hidden_argument():
    inbox = Inbox()
    result = call(
        make_toolbox(),
        "email_send_email",
        {"db": inbox},
        recipient="x@y.z",
        subject="s",
        body="b",
        db="my own database",
    )
    assert not result.ok and inbox.sent == []
    assert result.content.startswith("Error: invalid arguments for email_send_email:")
    assert "unknown argument 'db'" in result.content and result.content == f"Error: {result.error}"


def test_a_hidden_value_missing_from_the_context_is_the_envs_bug():
    with pytest.raises(KeyError, match="db"):
        call(make_toolbox(), "email_search_emails", {}, query="lunch")
    with pytest.raises(KeyError, match="db"):
        call(make_toolbox(), "email_search_emails", None, query="lunch", page="bad")  # raised either way


def test_unknown_tool_names_it_and_lists_the_tools():
    result = call(make_toolbox(), "email_search_email", {"db": Inbox()}, query="x")
    assert not result.ok
    assert result.content.startswith(
        "Error: unknown tool 'email_search_email' (did you mean 'email_search_emails'?)"
    )
    assert "available tools: email_get_email_information_by_id, email_search_emails" in result.content
    huge = call(make_toolbox(), "x" * 10_000)
    assert not huge.ok and len(huge.content) < 1100 and "set_status" in huge.content
    assert "did you mean" not in huge.content


def test_invalid_arguments_list_every_problem():
    result = call(make_toolbox(), "set_status", task_id=7, status="closed", page=True, owner="me")
    assert not result.ok
    assert result.error == (
        "invalid arguments for set_status:\n"
        "- argument 'task_id': expected string, got integer 7\n"
        '- argument \'status\': "closed" is not one of "open", "done"\n'
        "- argument 'page': expected integer, got boolean true\n"
        "- unknown argument 'owner'; accepted: task_id, status, page"
    )
    missing = call(make_toolbox(), "divide", a=1)
    assert missing.error == "invalid arguments for divide:\n- missing required argument 'b'"


def test_enum_and_int_parameters_receive_python_values():
    result = call(make_toolbox(), "set_status", task_id="T1", status="done", page=2.0)
    assert result.ok and result.value["status"] is Status.DONE and result.value["is_enum"]
    assert result.value["page"] == 2 and result.value["page_type"] == "int"
    assert json.loads(result.content)["status"] == "Status.DONE"  # rendered with default=str


def test_tool_error_versus_unexpected_exception():
    inbox = Inbox()
    toolbox = make_toolbox()
    missing = call(toolbox, "email_get_email_information_by_id", {"db": inbox}, email_id="99", field="body")
    assert not missing.ok and missing.content == "Error: no email with id '99'" and missing.value is None
    crash = call(toolbox, "divide", a=1, b=0)
    assert not crash.ok and crash.content == "Error: divide failed: ZeroDivisionError: division by zero"

    def explode(text: str) -> str:
        raise RuntimeError(text)

    long = call(Toolbox([explode]), "explode", text="boom " * 1000)
    assert long.error.startswith("explode failed: RuntimeError: boom boom") and len(long.error) == 1000


def test_async_tools_run_under_a_timeout():
    toolbox = make_toolbox(timeout_s=0.05)
    fast = call(toolbox, "slow_lookup", key="k")
    assert fast.ok and fast.content == "value of k"
    slow = call(toolbox, "slow_lookup", key="k", delay=5)
    assert not slow.ok and slow.content == "Error: slow_lookup timed out after 0.05 s"
    assert 0.04 < slow.seconds < 2
    own = call(toolbox, "flaky_service")  # a TimeoutError of the tool's own is a failure, not our timeout
    assert own.content == "Error: flaky_service failed: TimeoutError: upstream read timeout"


def test_return_values_are_rendered_and_long_ones_cut():
    toolbox = make_toolbox()
    found = call(toolbox, "email_search_emails", {"db": Inbox()}, query="lunch")
    assert found.ok and found.value == [
        {
            "email_id": "00000002",
            "sender": "dana@atlas.tech",
            "subject": "Lunch",
            "body": "Friday?",
            "sent": "2023-11-30",
        }
    ]
    assert json.loads(found.content) == found.value
    assert call(toolbox, "divide", a=1, b=4).content == "0.25"

    def greet(who: str) -> dict[str, Any]:
        return {"text": f"héllo {who}", "at": dt.date(2023, 11, 30)}

    assert call(Toolbox([greet]), "greet", who="Zoë").content == '{"text": "héllo Zoë", "at": "2023-11-30"}'

    def dump(n: int) -> str:
        return "x" * n

    cut = call(Toolbox([dump], max_result_chars=30), "dump", n=100)
    assert cut.ok and cut.content == "x" * 30 + "\n[... 70 more characters cut]" and cut.value == "x" * 100
    assert call(Toolbox([dump], max_result_chars=30), "dump", n=30).content == "x" * 30

    def loop() -> list:
        items: list = []
        items.append(items)
        return items

    circular = call(Toolbox([loop]), "loop")
    assert not circular.ok and "cannot be rendered as JSON" in circular.error


def test_a_sync_call_finishes_without_an_event_loop():
    for name, arguments, content in [
        ("divide", {"a": 1, "b": 2}, "0.5"),
        ("nope", {}, "Error: unknown tool"),
        ("divide", {"a": "1"}, "Error: invalid arguments"),
    ]:
        step = make_toolbox().acall(ToolCall(name, arguments))
        with pytest.raises(StopIteration) as finished:
            step.send(None)
        assert finished.value.value.content.startswith(content)


def test_tool_result_message():
    result = call(make_toolbox(), "divide", a=3, b=2)
    assert result.message() == {"role": "tool", "tool_call_id": "call_7", "name": "divide", "content": "1.5"}


def test_parsed_calls_run_end_to_end():
    text = (
        'I will search first.\n<tool_call>{"name": "email_search_emails", "arguments": {"query": "task"}}'
        '</tool_call>\n<tool_call>{"name": "email_delete_email", "arguments": {"email_id": "1"}}</tool_call>'
    )
    toolbox, inbox = make_toolbox(), Inbox()

    async def run() -> list[ToolResult]:
        return [await toolbox.acall(c, {"db": inbox}) for c in parse_xml_json_tool_calls(text).calls]

    found, unknown = asyncio.run(run())
    assert found.ok and json.loads(found.content)[0]["email_id"] == "00000001"
    assert [m["tool_call_id"] for m in (found.message(), unknown.message())] == ["call_0", "call_1"]
    assert unknown.content.startswith("Error: unknown tool 'email_delete_email'")


# ----- with_specs -------------------------------------------------------------------------------

FLAT_SPECS = [
    {
        "type": "function",
        "name": "email_search_emails",
        "description": "Searches for emails.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "page": {"type": "integer", "minimum": 1}},
            "required": [],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "email_get_email_information_by_id",
        "parameters": {
            "type": "object",
            "properties": {
                "email_id": {"type": "string"},
                "field": {"type": "string", "enum": ["sender", "subject", "body"]},
            },
            "required": ["email_id"],
        },
    },
]


def test_with_specs_announces_and_validates_with_the_rows_specs():
    toolbox = make_toolbox(max_result_chars=500, timeout_s=3).with_specs(FLAT_SPECS)
    assert toolbox.names == ("email_search_emails", "email_get_email_information_by_id")
    assert toolbox.max_result_chars == 500 and toolbox.timeout_s == 3
    assert toolbox.specs()[0] == {
        "type": "function",
        "function": {
            "name": "email_search_emails",
            "description": "Searches for emails.",
            "parameters": FLAT_SPECS[0]["parameters"],
        },
    }
    assert toolbox["email_get_email_information_by_id"].description == "Retrieve one field of an email."
    inbox = Inbox()
    assert call(toolbox, "email_search_emails", {"db": inbox}, query="lunch", page=1).ok
    zero = call(toolbox, "email_search_emails", {"db": inbox}, query="lunch", page=0)  # the row's own minimum
    assert zero.error == "invalid arguments for email_search_emails:\n- argument 'page': must be >= 1, got 0"
    field = call(
        toolbox, "email_get_email_information_by_id", {"db": inbox}, email_id="00000001", field="date"
    )
    assert "argument 'field': \"date\" is not one of" in field.error
    # the row forgot that the function needs `field`: still a readable message, not a crash
    forgot = call(toolbox, "email_get_email_information_by_id", {"db": inbox}, email_id="00000001")
    assert forgot.error.endswith("- missing required argument 'field'")
    # the row's schema is open (no additionalProperties), but the function takes no such argument
    extra = call(
        toolbox, "email_get_email_information_by_id", {"db": inbox}, email_id="1", field="body", db=1
    )
    assert "unknown argument 'db'" in extra.error
    assert not call(toolbox, "divide", a=1, b=2).ok  # not in the row's tool list


def test_with_specs_accepts_chat_completions_specs_and_refuses_mismatches():
    toolbox = make_toolbox()
    nested = toolbox.with_specs(
        [
            {
                "type": "function",
                "function": {
                    "name": "divide",
                    "description": "a / b",
                    "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
                },
            }
        ]
    )
    assert nested.names == ("divide",) and nested["divide"].description == "a / b"
    assert call(nested, "divide", a=1).error.endswith("missing required argument 'b'")
    with pytest.raises(ValueError, match="names 'email_delete_email', which this toolbox lacks"):
        toolbox.with_specs([*FLAT_SPECS, {"type": "function", "name": "email_delete_email"}])
    with pytest.raises(
        ValueError, match=r"announces parameter\(s\) \['folder'\] that 'email_send_email' does not take"
    ):
        toolbox.with_specs(
            [
                {
                    "name": "email_send_email",
                    "parameters": {
                        "type": "object",
                        "properties": {"recipient": {"type": "string"}, "folder": {"type": "string"}},
                    },
                }
            ]
        )


def test_with_specs_of_the_public_workplace_tools(shared_data: Path):
    """The email tools of the public workplace rows, announced with their own (flat) specs."""
    specs = json.loads((shared_data / "workplace-tables" / "email.json").read_text())["tools"]
    names = {s["name"] for s in specs}
    ours = {"email_get_email_information_by_id", "email_search_emails", "email_send_email"}
    assert ours <= names
    toolbox = make_toolbox().with_specs([s for s in specs if s["name"] in ours])
    inbox = Inbox()
    found = call(toolbox, "email_search_emails", {"db": inbox}, query="", date_min="2023-11-30", page_size=2)
    assert [e["email_id"] for e in found.value] == ["00000002"]
    bad = call(toolbox, "email_send_email", {"db": inbox}, recipient="carlos@atlas.tech", subject="Hi")
    assert bad.error.endswith("- missing required argument 'body'") and inbox.sent == []
    with pytest.raises(ValueError, match="lacks"):
        make_toolbox().with_specs(specs)  # the public list has tools these functions do not cover


# ----- a whole turn: Toolbox.aturn ------------------------------------------------------------------


def blocks(*calls: tuple[str, dict[str, Any]]) -> str:
    return "".join(f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in calls)


def turn(toolbox: Toolbox, reply: str | Completion, **options: Any) -> ToolTurn:
    return asyncio.run(
        toolbox.aturn(reply, {"db": options.pop("db", Inbox())}, **{"max_calls": 4, **options})
    )


def test_a_turn_runs_the_calls_of_the_answer_with_the_hidden_context():
    inbox = Inbox()
    reply = (
        "<think>"
        + blocks(("email_send_email", {"recipient": "x", "subject": "s", "body": "b"}))
        + "</think>"
        + blocks(
            ("email_send_email", {"recipient": "dana@atlas.tech", "subject": "Hi", "body": "Lunch?"}),
            ("divide", {"a": 1, "b": 0}),
        )
    )
    done = turn(make_toolbox(), reply, db=inbox)
    assert [m["content"][:6] for m in done.messages] == ["Email ", "Error:"] and done.messages[0][
        "name"
    ] == "email_send_email"
    assert len(inbox.sent) == 1  # the call inside <think> did not run
    assert (done.calls, done.errors, done.ended, done.info) == (
        2,
        1,
        False,
        {"tool_calls": 2, "tool_errors": 1},
    )


def test_a_reply_without_calls_ends_and_a_cut_one_runs_nothing():
    toolbox = make_toolbox()
    assert turn(toolbox, "The answer is 4.") == ToolTurn(ended=True)
    assert turn(toolbox, "<think>" + blocks(("divide", {"a": 1, "b": 1}))) == ToolTurn(
        ended=True
    )  # never closed
    assert (
        turn(toolbox, Completion(blocks(("divide", {"a": 1, "b": 1})), finish_reason="length")) == ToolTurn()
    )


def test_a_turn_is_bounded_and_broken_blocks_are_errors_within_the_bound():
    reply = blocks(*[("divide", {"a": 1, "b": 1})] * 3) + "<tool_call>{broken</tool_call>" * 3
    done = turn(make_toolbox(), reply, max_calls=4)
    assert done.calls == 3 and done.errors == 3 and len(done.messages) == 5
    assert "invalid JSON" in done.messages[3]["content"]
    assert (
        done.messages[4]["content"]
        == "Error: only the first 4 tool calls of a reply run; 2 more were not run"
    )
    many = turn(make_toolbox(), blocks(*[("divide", {"a": 1, "b": 1})] * 15), max_calls=2)
    assert many.messages[-1]["content"].endswith(
        "13 more were not run (" + ", ".join(["divide"] * 10) + ", ...)"
    )


def test_a_stop_reason_leaves_the_remaining_calls_unrun():
    ran: list[int] = []

    @tool
    def step(n: int) -> int:
        ran.append(n)
        return n

    done = turn(
        Toolbox([step]),
        blocks(*[("step", {"n": n}) for n in range(4)]),
        stop=lambda: "the episode finished" if 1 in ran else None,
    )
    assert (
        ran == [0, 1]
        and done.messages[-1]["content"] == "Error: the episode finished; 2 more were not run (step, step)"
    )


def test_drop_nulls_treats_a_null_argument_as_not_given():
    reply = blocks(("email_search_emails", {"query": "Lunch", "page": None}))  # page: int = 1
    assert turn(make_toolbox(drop_nulls=True), reply).errors == 0
    assert turn(make_toolbox(drop_nulls=True).with_specs(make_toolbox().specs()), reply).errors == 0
    assert turn(make_toolbox(), reply).errors == 1
