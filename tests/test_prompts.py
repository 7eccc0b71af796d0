"""The prompt files: consistency with the tool registry, feedback fields, loading errors."""

from __future__ import annotations

import hashlib
import re
import shutil
import string
from pathlib import Path

import pytest

from sam3_agent.agent.parsing import parse_response
from sam3_agent.agent.prompts import DEFAULT_PROMPTS_DIR, FEEDBACK_FIELDS, PromptError, Prompts, load_prompts
from sam3_agent.agent.tool_specs import TOOL_SPECS
from sam3_agent.agent.verdicts import parse_group_verdicts, parse_verdict

# The keys and fields the code relies on, written out here as the specification.
EXPECTED_FIELDS: dict[str, set[str]] = {
    "initial_user": {"query"},
    "tried_phrases_note": {"phrases"},
    "image_omitted": set(),
    "empty_output": set(),
    "no_tool_call": set(),
    "unclosed_think": set(),
    "truncated": {"limit"},
    "bad_json": {"detail"},
    "bad_call": {"detail"},
    "bad_function_call": {"detail"},
    "unknown_tool": {"name", "tools"},
    "name_corrected": {"raw", "name"},
    "ignored_calls": {"count"},
    "untagged_call": set(),
    "listed_call": set(),
    "several_calls": {"count"},
    "call_in_reasoning": set(),
    "missing_parameter": {"tool", "parameter", "schema"},
    "empty_parameter": {"tool", "parameter", "schema"},
    "extra_parameter": {"tool", "parameters", "schema"},
    "wrong_type": {"tool", "parameter", "expected", "schema"},
    "no_masks_yet": {"tool"},
    "no_current_masks": {"tool"},
    "mask_numbers_not_list": {"value", "parameter", "tool"},
    "mask_number_not_integer": {"value", "parameter"},
    "mask_number_out_of_range": {"value", "count"},
    "mask_number_repeated": {"value"},
    "empty_selection": set(),
    "empty_examine_list": set(),
    "phrase_already_used": {"phrase", "used"},
    "segment_result": {"count", "phrase"},
    "dense_tiles": {"count", "places"},
    "phrase_cut": {"limit", "phrase", "read"},
    "segment_zero": {"phrase", "used"},
    "examine_result": {"kept", "total"},
    "examine_result_unchecked": {"kept", "total"},
    "examine_result_named": {"examined", "kept", "total", "not_examined"},
    "examine_unchecked": {"numbers"},
    "examine_unclear": {"numbers"},
    "examine_all_rejected": {"total"},
    "verify_user": {"query"},
    "verify_candidate": {"mask_number"},
    "verify_retry": set(),
    "verify_truncated": {"limit"},
    "examine_in_groups": {"size", "groups"},
    "verify_group_user": {"query"},
    "verify_group_candidates": {"numbers", "example"},
    "verify_group_retry": {"numbers", "example"},
    "verify_group_truncated": {"limit", "numbers", "example"},
}

TOOL_NAMES = set(TOOL_SPECS)
PARAMETER_NAMES = {name for spec in TOOL_SPECS.values() for name in spec.parameter_names}
SNAKE_CASE = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")
CALL_TAGS = {"tool_call"}  # Qwen's tag around a native function call, named by the native format's feedback
TOOL_BLOCK = re.compile(r"^<think>.*?</think>\s*<tool>.*?</tool>", re.DOTALL | re.MULTILINE)


@pytest.fixture(scope="module")
def prompts() -> Prompts:
    return load_prompts()


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def _without_fields(template: str) -> str:
    """The literal text of a template (fields removed), as the model would see it."""
    return "".join(literal for literal, _, _, _ in string.Formatter().parse(template))


# ---------------------------------------------------------------- main system prompt


def test_main_prompt_names_every_tool_and_parameter(prompts):
    for name in TOOL_NAMES | PARAMETER_NAMES:
        assert name in prompts.main_system, name


def test_main_prompt_examples_parse_to_valid_calls_one_per_tool(prompts):
    examples = TOOL_BLOCK.findall(prompts.main_system)
    calls = [parse_response(example) for example in examples]
    assert [(c.error, c.name_corrected, c.ignored_calls) for c in calls] == [(None, False, 0)] * 4
    assert [c.call.name for c in calls] == list(TOOL_SPECS)
    for parsed in calls:
        assert tuple(parsed.call.parameters) == TOOL_SPECS[parsed.call.name].required_names


def test_main_prompt_names_no_tool_that_does_not_exist(prompts):
    called = set(re.findall(r"\b([a-z]+_[a-z_]+)\(", prompts.main_system))
    named = set(re.findall(r'"name":\s*"([^"]*)"', prompts.main_system))
    assert called <= TOOL_NAMES
    assert named == TOOL_NAMES


@pytest.mark.parametrize("which", ["main_system", "verify_system"])
def test_system_prompts_use_no_snake_case_word_outside_the_registry(prompts, which):
    words = set(SNAKE_CASE.findall(getattr(prompts, which)))
    assert words - TOOL_NAMES - PARAMETER_NAMES == set()


def test_feedback_uses_no_snake_case_word_outside_the_registry(prompts):
    words = {w for text in prompts.feedback.values() for w in SNAKE_CASE.findall(_without_fields(text))}
    assert words - TOOL_NAMES - PARAMETER_NAMES - CALL_TAGS == set()


def test_main_prompt_shows_how_to_select_many_masks_with_a_range(prompts):
    assert '["1-150"] selects all of 150 masks' in prompts.main_system
    assert "at most 100" not in prompts.main_system  # no cap below SAM 3's 200 masks per phrase


# ---------------------------------------------------------------- verification prompt


def test_verify_prompt_shows_both_verdict_tags_then_the_group_form(prompts):
    tags = re.findall(r"<verdict>\w+</verdict>", prompts.verify_system)
    assert tags == ["<verdict>Accept</verdict>", "<verdict>Reject</verdict>"] * 2
    assert [parse_verdict(tag) for tag in tags[:2]] == [("accept", None), ("reject", None)]
    group_example = prompts.verify_system[prompts.verify_system.index("For a group"):]
    assert parse_group_verdicts("<think>x</think>" + group_example, [7, 8]) == {7: ("accept", None), 8: ("reject", None)}


@pytest.mark.parametrize("key", ["verify_group_candidates", "verify_group_retry", "verify_group_truncated"])
def test_group_requests_show_a_line_the_group_reader_reads_for_the_masks_named(prompts, key):
    text = prompts.format(key, numbers="12 and 13", example=12, limit="64 tokens")
    assert "masks 12 and 13" in text
    example = text[text.index("Mask 12:"):].split(" or ")[0]
    assert parse_group_verdicts("<think>x</think>" + example, [12]) == {12: ("accept", None)}


@pytest.mark.parametrize("key", ["verify_retry", "verify_truncated"])
def test_verify_retry_restates_both_verdict_tags(prompts, key):
    text = prompts.format(key, limit="64 tokens")
    assert "<verdict>Accept</verdict>" in text and "<verdict>Reject</verdict>" in text


# ---------------------------------------------------------------- feedback texts


def test_code_and_file_agree_on_the_feedback_keys_and_fields():
    assert {key: set(fields) for key, fields in FEEDBACK_FIELDS.items()} == EXPECTED_FIELDS


@pytest.mark.parametrize("key", sorted(EXPECTED_FIELDS))
def test_feedback_text_uses_exactly_its_fields(prompts, key):
    assert _fields(prompts.feedback[key]) == EXPECTED_FIELDS[key]


@pytest.mark.parametrize("key", sorted(EXPECTED_FIELDS))
def test_feedback_text_formats_with_its_fields(prompts, key):
    values = {field: f"<{field.upper()}>" for field in EXPECTED_FIELDS[key]}
    text = prompts.format(key, **values)
    for value in values.values():
        assert value in text
    assert 20 <= len(text) <= 600


def test_bad_json_feedback_shows_a_parseable_example(prompts):
    text = prompts.format("bad_json", detail="Expecting value")
    example = re.search(r"<tool>\{.*?</tool>", text).group(0)
    assert parse_response(example).call.name == "segment_phrase"


def test_format_ignores_fields_the_template_does_not_use(prompts):
    assert prompts.format("mask_number_repeated", value=3, count=9) == (
        "Mask 3 is listed more than once. List each mask number once."
    )


def test_format_of_an_unknown_key_names_it(prompts):
    with pytest.raises(PromptError, match="no feedback text named 'segment_done'"):
        prompts.format("segment_done")


def test_format_without_a_needed_field_names_it(prompts):
    with pytest.raises(PromptError, match="'segment_result' needs the field\\(s\\) phrase"):
        prompts.format("segment_result", count=2)


# ---------------------------------------------------------------- loading and hashes


def test_default_folder_is_prompts_next_to_the_package():
    assert DEFAULT_PROMPTS_DIR == Path(__file__).resolve().parent.parent / "sam3_agent" / "prompts"


def test_hashes_are_sha256_of_the_texts_and_the_feedback_file(prompts):
    feedback_bytes = (DEFAULT_PROMPTS_DIR / "feedback.toml").read_bytes()
    assert prompts.hashes() == {
        "main_system": hashlib.sha256(prompts.main_system.encode()).hexdigest(),
        "verify_system": hashlib.sha256(prompts.verify_system.encode()).hexdigest(),
        "feedback": hashlib.sha256(feedback_bytes).hexdigest(),
    }


def test_hashes_of_prompts_built_in_code_cover_the_feedback_dict():
    a = Prompts("m", "v", {"k": "one"}).hashes()["feedback"]
    b = Prompts("m", "v", {"k": "two"}).hashes()["feedback"]
    assert a == hashlib.sha256(b'{"k": "one"}').hexdigest()
    assert a != b


@pytest.fixture()
def prompt_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "prompts"
    shutil.copytree(DEFAULT_PROMPTS_DIR, folder)
    return folder


def test_loading_a_copy_gives_the_same_prompts(prompts, prompt_copy):
    assert load_prompts(prompt_copy) == prompts


@pytest.mark.parametrize("name", ["main_system.md", "verify_system.md", "feedback.toml"])
def test_missing_file_is_named(prompt_copy, name):
    (prompt_copy / name).unlink()
    with pytest.raises(PromptError, match=re.escape(f"prompt file {prompt_copy / name} is missing")):
        load_prompts(prompt_copy)


def test_missing_feedback_key_is_named(prompt_copy):
    path = prompt_copy / "feedback.toml"
    text = path.read_text()
    path.write_text(re.sub(r"^segment_zero = .*$", "", text, flags=re.MULTILINE))
    with pytest.raises(PromptError, match="lacks the key\\(s\\) segment_zero"):
        load_prompts(prompt_copy)


def test_feedback_field_the_code_does_not_fill_is_refused(prompt_copy):
    path = prompt_copy / "feedback.toml"
    path.write_text(path.read_text() + "\nextra_note = 'any {field} is fine in a key the code does not use'\n")
    assert load_prompts(prompt_copy).format("extra_note", field="x") == "any x is fine in a key the code does not use"
    path.write_text(path.read_text().replace("empty_output = '''", "empty_output = '''{limit} "))
    with pytest.raises(PromptError, match="'empty_output' uses the field\\(s\\) limit, but only these are filled in: none"):
        load_prompts(prompt_copy)


def test_invalid_toml_is_reported(prompt_copy):
    (prompt_copy / "feedback.toml").write_text("initial_user = 'unterminated\n")
    with pytest.raises(PromptError, match="feedback.toml is not valid TOML"):
        load_prompts(prompt_copy)


def test_non_string_feedback_value_is_refused(prompt_copy):
    path = prompt_copy / "feedback.toml"
    path.write_text(path.read_text() + "\nretries = 3\n")
    with pytest.raises(PromptError, match="'retries' must be a string, not int"):
        load_prompts(prompt_copy)
