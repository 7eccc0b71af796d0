"""The model's action space: the four tools, their parameters, JSON types and which are optional.

This registry is the single source of truth: the tools module validates calls against it and a
test checks that the prompts in ``prompts/`` name exactly these tools and parameters.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParameterSpec:
    """One parameter of a tool: its name, JSON type (``"string"``, ``"array<integer>"`` or ``"boolean"``) and whether
    a call must give it (an optional one changes what the tool does when given: ``examine_each_mask``'s ``masks``
    and ``in_groups``)."""

    name: str
    json_type: str
    description: str
    required: bool = True


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, parameters, whether it ends the run and whether, when it runs,
    it replaces the current masks (and so the image that shows them)."""

    name: str
    parameters: tuple[ParameterSpec, ...]
    ends_run: bool
    replaces_masks: bool = False

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    @property
    def required_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters if p.required)

    def schema_text(self, arguments_key: str = "parameters") -> str:
        """A one-line JSON example of a call, used in feedback messages; with optional parameters, the call
        without them, ``or`` the call with them. ``arguments_key``: ``"parameters"`` (the reference format's word) or
        ``"arguments"`` (the function-calling word of the native format)."""
        required = tuple(p for p in self.parameters if p.required)
        forms = [required] + ([self.parameters] if len(required) < len(self.parameters) else [])
        return " or ".join(self._call_text(form, arguments_key) for form in forms)

    def _call_text(self, parameters: tuple[ParameterSpec, ...], arguments_key: str) -> str:
        example = {"string": '"..."', "boolean": "true"}
        params = ", ".join(f'"{p.name}": ' + example.get(p.json_type, "[1, 2]") for p in parameters)
        return f'{{"name": "{self.name}", "{arguments_key}": {{{params}}}}}'


TOOL_SPECS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "segment_phrase",
            (ParameterSpec("text_prompt", "string", "a short, simple noun phrase for SAM 3"),),
            ends_run=False,
            replaces_masks=True,
        ),
        ToolSpec(
            "examine_each_mask",
            (ParameterSpec("masks", "array<integer>", "only these masks are checked (numbers or ranges \"A-B\"); "
                           "the others are kept unchecked", required=False),
             ParameterSpec("in_groups", "boolean", "true: check the masks several at a time, each group in one view "
                           "(far fewer checks for many masks, each less close)", required=False)),
            ends_run=False,
            replaces_masks=True,
        ),
        ToolSpec(
            "select_masks_and_return",
            (ParameterSpec("final_answer_masks", "array<integer>", "1-based numbers of masks currently shown, or ranges \"A-B\""),),
            ends_run=True,
        ),
        ToolSpec("report_no_mask", (), ends_run=True),
    )
}
