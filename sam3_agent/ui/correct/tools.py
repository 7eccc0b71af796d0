"""The Correct canvas's tools: their names and what the tool picker calls them.

The canvas (``canvas.js``) sends clicks for ``select`` / ``toggle`` / ``point_on`` / ``point_off``, strokes for
``paint`` / ``erase`` and a box (dragged, or two taps on opposite corners) for ``box``. No Gradio here.
"""

from __future__ import annotations

TOOL_SELECT = "select"
TOOL_TOGGLE = "toggle"
TOOL_POSITIVE = "point_on"
TOOL_NEGATIVE = "point_off"
TOOL_PAINT = "paint"
TOOL_ERASE = "erase"
TOOL_BOX = "box"
# tool -> what the tool picker says (the number is its keyboard shortcut)
TOOLS: dict[str, str] = {
    TOOL_SELECT: "1 Select",
    TOOL_TOGGLE: "2 Show / hide",
    TOOL_POSITIVE: "3 Point on (+)",
    TOOL_NEGATIVE: "4 Point off (-)",
    TOOL_PAINT: "5 Paint",
    TOOL_ERASE: "6 Erase",
    TOOL_BOX: "7 Box",
}
CLICK_TOOLS = (TOOL_SELECT, TOOL_TOGGLE, TOOL_POSITIVE, TOOL_NEGATIVE)
BRUSH_TOOLS = (TOOL_PAINT, TOOL_ERASE)
