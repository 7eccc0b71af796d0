"""The objects of a clip as the page lists them: a table (id in its colour, label, first and last frame, frames
present, mean score, fixed frames) and the choices of the toggles and of the object to fix.

No Gradio here.
"""

from __future__ import annotations

from html import escape

from ...video.export import OBJECT_COLORS
from ...video.tracks import ObjectSummary, Tracks


def object_name(row: ObjectSummary) -> str:
    """``"2: the bunny"``: how a toggle or a menu names an object."""
    return f"{row.object_id}: {row.label}"


def object_choices(tracks: Tracks | None) -> list[tuple[str, int]]:
    """(name, id) of every object, ascending ids."""
    return [] if tracks is None else [(object_name(row), row.object_id) for row in tracks.summary()]


def _frames(frames: tuple[int, ...]) -> str:
    shown = ", ".join(str(f) for f in frames[:6])
    return shown + (f" (+{len(frames) - 6})" if len(frames) > 6 else "")


def render_objects(tracks: Tracks | None, hidden: frozenset[int] = frozenset()) -> str:
    """The objects table (``table.video-objects``, a row ``tr[data-object]`` per object; drawn-off ones marked
    ``object-off``), or a line saying there is none."""
    rows = [] if tracks is None else tracks.summary()
    if not rows:
        return '<div class="video-objects video-none">No objects.</div>'
    body = []
    for row in rows:
        red, green, blue = (int(v) for v in OBJECT_COLORS[row.object_id - 1])
        first = "-" if row.first_frame is None else str(row.first_frame)
        last = "-" if row.last_frame is None else str(row.last_frame)
        off = ' class="object-off"' if row.object_id in hidden else ""
        body.append(
            f'<tr data-object="{row.object_id}"{off}><td><span class="object-swatch" '
            f'style="background: rgb({red}, {green}, {blue})" aria-hidden="true"></span>{row.object_id}</td>'
            f"<td>{escape(row.label)}</td><td>{first}</td><td>{last}</td><td>{row.frames_present}</td>"
            f"<td>{row.mean_score:.3f}</td><td>{escape(_frames(row.fixed_frames))}</td></tr>"
        )
    return ('<table class="video-objects"><thead><tr><th>object</th><th>label</th><th>first frame</th>'
            '<th>last frame</th><th>frames present</th><th>mean score</th><th>fixed on frames</th></tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")
