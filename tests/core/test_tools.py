from cascade_envs.tools import (
    normalise_tool,
    parse_xml_json_tool_calls,
    render_tools_prompt,
    tool_parsers,
    with_tools,
)


def test_parses_calls_and_keeps_surrounding_text():
    text = 'Let me look.\n<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>\n<tool_call>\n{"name": "g", "arguments": "{\\"b\\": 2}"}\n</tool_call>'
    parsed = parse_xml_json_tool_calls(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("f", {"a": 1}), ("g", {"b": 2})]
    assert parsed.content == "Let me look." and parsed.errors == []


def test_broken_calls_are_reported_not_raised():
    text = '<tool_call>{"name": "f", "arguments": {</tool_call><tool_call>[1]</tool_call><tool_call>{"name": "h", "arguments": [1]}</tool_call><tool_call>{"name": "u"'
    parsed = parse_xml_json_tool_calls(text)
    assert parsed.calls == []
    assert len(parsed.errors) == 4
    assert "invalid JSON" in parsed.errors[0] and "'name'" in parsed.errors[1]
    assert "'arguments' must be an object" in parsed.errors[2]


def test_no_calls():
    parsed = parse_xml_json_tool_calls("just an answer")
    assert parsed.calls == [] and parsed.content == "just an answer"


def test_render_accepts_both_tool_layouts():
    flat = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}
    nested = {
        "type": "function",
        "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
    }
    assert normalise_tool(flat) == normalise_tool(nested)
    section = render_tools_prompt([flat])
    assert "<tools>" in section and '"name": "f"' in section and "<tool_call>" in section


def test_with_tools_extends_the_system_prompt():
    tools = [{"type": "function", "name": "f"}]
    out = with_tools([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "q"}], tools)
    assert out[0]["content"].startswith("Be brief.") and "<tools>" in out[0]["content"] and len(out) == 2
    out = with_tools([{"role": "user", "content": "q"}], tools)
    assert out[0]["role"] == "system" and len(out) == 2
    assert with_tools([{"role": "user", "content": "q"}], []) == [{"role": "user", "content": "q"}]


def test_default_parser_is_registered():
    assert tool_parsers.get("xml_json") is parse_xml_json_tool_calls
