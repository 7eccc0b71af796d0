"""Property: any valid tool call round-trips exactly through the parser, whatever its string values hold.

String values are drawn from arbitrary text plus the characters that broke earlier parsers: tool and think
tags, braces, brackets, quotes of every kind, backslashes, control characters, full-width punctuation and
CJK text. The call is written as JSON (ASCII-escaped or not, compact or indented) or as a Python literal.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sam3_agent.agent.parsing import parse_response
from sam3_agent.agent.tool_specs import TOOL_SPECS
from sam3_agent.messages import ToolCall

NASTY = [
    "</tool>", "<tool>", "<tool_call>", "</tool_call>", "</think>", "<think>", "<verdict>", "{", "}", "[", "]",
    '"', "'", "\\", "\u201c", "\u201d", "\u2018", "\u2019", "\u300c", "\u300d", "\uff5b", "\uff5d", "\uff1a",
    "\uff0c", "\u3001", "\n", "\t", "\x00", "\x1b", ",", ":", "True", "None", "null", "\u72d7", "\u7ea2\u8272\u7684\u8f66",
    "```json", " ", "\u00e9",
]
TEXT = st.lists(st.one_of(st.sampled_from(NASTY), st.text(st.characters(exclude_categories=("Cs",)), max_size=6)),
                max_size=8).map("".join)
VALUE = st.one_of(TEXT, st.integers(-10**6, 10**6), st.booleans(), st.none(), st.lists(st.integers(1, 100), max_size=4))
PARAMETERS = st.dictionaries(TEXT.filter(bool), VALUE, max_size=3)


def _written(call: dict, form: str) -> str:
    if form == "python":
        return repr(call)
    if form == "ascii":
        return json.dumps(call)
    if form == "indented":
        return json.dumps(call, ensure_ascii=False, indent=2)
    return json.dumps(call, ensure_ascii=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(TOOL_SPECS)),
    parameters=PARAMETERS,
    form=st.sampled_from(["json", "ascii", "indented", "python"]),
    tag=st.sampled_from([("<tool>", "</tool>"), ("<tool_call>\n", "\n</tool_call>")]),
)
def test_any_valid_call_round_trips_exactly(name, parameters, form, tag):
    call = {"name": name, "parameters": parameters}
    text = f"<think>Reasoning about the query.</think>\n{tag[0]}{_written(call, form)}{tag[1]}"
    parsed = parse_response(text)
    assert parsed.error is None, (parsed.error, parsed.error_fields, text)
    assert parsed.call == ToolCall(name, parameters, name)
    assert parsed.ignored_calls == 0
    # the stored, normalised text parses back to the same call
    assert parse_response(parsed.stored_text).call == parsed.call
