"""The file editor's and the terminal's commands on a real workspace (bwrap), without the SDK."""

from __future__ import annotations

import asyncio

import pytest

from cascade_envs.envs.swe.editor import Editor
from cascade_envs.envs.swe.terminal import Shell
from cascade_envs.tools import ToolError

from .conftest import open_session

READER = "/testbed/inilite/reader.py"


def play(task, script):
    async def go():
        session = await open_session(task)
        try:
            return await script(session)
        finally:
            await session.aclose()

    return asyncio.run(go())


def test_view_create_replace_insert_undo(inilite):
    async def script(session):
        editor = Editor(session, "/testbed")
        listing = await editor.view("/testbed")
        lines = await editor.view(READER, [52, 53])
        created = await editor.create("/testbed/notes/todo.txt", "one\ntwo")
        replaced = await editor.str_replace("/testbed/notes/todo.txt", "two", "TWO")
        inserted = await editor.insert("/testbed/notes/todo.txt", 0, "zero")
        after_edits = await editor.view("/testbed/notes/todo.txt")
        await editor.undo_edit("/testbed/notes/todo.txt")
        undone = (await session.aread("notes/todo.txt")).decode()
        return listing, lines, created, replaced, inserted, after_edits, undone

    listing, lines, created, replaced, inserted, after_edits, undone = play(inilite, script)
    assert "/testbed/inilite/reader.py" in listing and "/testbed/tests/test_reader.py" in listing
    assert lines.splitlines()[1:] == [
        '    52\t        parts = line.split("=")',
        "    53\t        key, value = parts[0].strip(), parts[1].strip()",
    ]
    assert created == "File created successfully at: /testbed/notes/todo.txt"
    assert "has been edited" in replaced and "     2\tTWO" in replaced
    assert "     1\tzero" in inserted
    assert after_edits.endswith("     1\tzero\n     2\tone\n     3\tTWO")
    assert undone == "one\nTWO"


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("view", ("relative/path.py",), "not an absolute path"),
        ("view", ("/etc/passwd",), "outside the workspace"),
        ("view", ("/testbed/../etc/passwd",), "outside the workspace"),
        ("view", ("/testbed/missing.py",), "does not exist"),
        ("view", (READER, [0, 3]), "invalid view_range"),
        ("view", ("/testbed", [1, 2]), "not allowed when path points to a directory"),
        ("create", (READER, "x"), "already exists"),
        ("create", ("/testbed/x.py", None), "file_text"),
        ("str_replace", (READER, "no such text", "x"), "did not appear verbatim"),
        ("str_replace", (READER, "line", "x"), "Multiple occurrences"),
        ("str_replace", (READER, "same", "same"), "must be different"),
        ("insert", (READER, 10_000, "x"), "should be within"),
        ("undo_edit", (READER,), "no edit history"),
        ("str_replace", ("/testbed/inilite", "a", "b"), "is a directory"),
    ],
)
def test_editor_mistakes_are_tool_errors(inilite, command, args, message):
    async def script(session):
        with pytest.raises(ToolError, match=message):
            await getattr(Editor(session, "/testbed"), command)(*args)

    play(inilite, script)


def test_binary_files_are_refused(inilite):
    async def script(session):
        await session.awrite({"blob.bin": b"\x00\x01\x02"})
        with pytest.raises(ToolError, match="binary"):
            await Editor(session, "/testbed").view("/testbed/blob.bin")

    play(inilite, script)


def test_shell_carries_directory_and_exports_but_nothing_else(inilite):
    async def script(session):
        shell = Shell("/testbed")
        first = await shell.run(session, "cd inilite && export GREETING=hi && echo to-stderr >&2", 10)
        second = await shell.run(session, "pwd; echo $GREETING; sleep 30 &", 10)
        third = await shell.run(session, "ps -e -o comm= | grep -c sleep; exit 3", 10)
        shell.reset()
        fourth = await shell.run(session, "pwd; echo ${GREETING:-unset}", 10)
        return first, second, third, fourth

    first, second, third, fourth = play(inilite, script)
    assert first.output == "to-stderr\n" and first.cwd == "/testbed/inilite"  # stderr merged, state carried
    assert second.output == "/testbed/inilite\nhi\n"
    assert third.output == "0\n" and third.exit_code == 3 and third.cwd == "/testbed/inilite"
    assert fourth.output == "/testbed\nunset\n"


def test_shell_timeouts_and_floods_say_so(inilite):
    async def script(session):
        shell = Shell("/testbed")
        hang = await shell.run(session, "cd inilite; sleep 60", 1)
        flood = await shell.run(session, "yes flood", 10)
        after = await shell.run(session, "pwd", 10)
        return hang, flood, after

    hang, flood, after = play(inilite, script)
    assert hang.timed_out and "timed out after 1 seconds" in hang.note
    assert "too much output" in flood.note and len(flood.output) <= 1 << 20
    assert after.output == "/testbed\n"  # a killed command changes no state
