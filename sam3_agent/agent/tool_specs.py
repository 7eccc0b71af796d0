"""The model's action space: the four tools, their parameters and JSON types.

This registry is the single source of truth: the tools module validates calls against it and a
test checks that the prompts in ``prompts/`` name exactly these tools and parameters.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParameterSpec:
    """One parameter of a tool: its name, JSON type (``"string"`` or ``"array<integer>"``)."""

    name: str
    json_type: str
    description: str


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, parameters (all required), whether it ends the run and whether, when it runs,
    it replaces the current masks (and so the image that shows them)."""

    name: str
    parameters: tuple[ParameterSpec, ...]
    ends_run: bool
    replaces_masks: bool = False

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def schema_text(self) -> str:
        """A one-line JSON example of a call, used in feedback messages."""
        params = ", ".join(
            f'"{p.name}": ' + ('"..."' if p.json_type == "string" else "[1, 2]") for p in self.parameters
        )
        return f'{{"name": "{self.name}", "parameters": {{{params}}}}}'


TOOL_SPECS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "segment_phrase",
            (ParameterSpec("text_prompt", "string", "a short, simple noun phrase for SAM 3"),),
            ends_run=False,
            replaces_masks=True,
        ),
        ToolSpec("examine_each_mask", (), ends_run=False, replaces_masks=True),
        ToolSpec(
            "select_masks_and_return",
            (ParameterSpec("final_answer_masks", "array<integer>", "1-based numbers of masks currently shown, or ranges \"A-B\""),),
            ends_run=True,
        ),
        ToolSpec("report_no_mask", (), ends_run=True),
    )
}
