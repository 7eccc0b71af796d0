"""The report of a video benchmark: ``metrics.json``, ``expressions.csv``, ``report.html``; the image report's form
(``report``) with J, F and J&F in place of IoU.

Written into one folder (``OUT/eval`` by the CLI), every file atomically::

    report.html        the notes (random or scripted models), the protocol (named, its source, the split, how many
                       expressions were scored of how many the dataset holds), J, F and J&F overall and per subset
                       (referring / reasoning under revos-visa), every expression lowest J&F first with its run's
                       status, rounds, objects and frames tracked and a link to its trace, the unscored expressions
    metrics.json       the same numbers (``VideoEvaluation.to_json``: fractions in [0, 1], per-frame J and F too), the
                       protocol, the notes
    expressions.csv    one row per scored expression: J, F, J&F, frames, type, status, rounds, objects, frames tracked

No published numbers are set beside this run's: none are recorded here for the protocol's split (the report says so),
so a reader compares them knowingly.
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..batch.files import write_json_atomic, write_text_atomic
from ..batch.items import VideoItem
from ..batch.layout import BatchLayout
from ..formats.revos import TYPE_NAMES
from .video_batch import VideoBatchEvaluation
from .video_evaluate import ExpressionScore, JFMeans


@dataclass(frozen=True)
class VideoProtocolRun:
    """What the report says about how its numbers were made: the split and the counts (the protocol is the
    evaluation's)."""

    split: str
    dataset_expressions: int
    selected: int


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def _means_line(name: str, means: JFMeans) -> str:
    return (f"{name}: J {_percent(means.j)}, F {_percent(means.f)}, J&F {_percent(means.j_and_f)} "
            f"over {means.expressions} expression(s)")


def protocol_lines(result: VideoBatchEvaluation, run: VideoProtocolRun) -> list[str]:
    """The protocol, the split, the counts and the headline numbers (in %), as the CLI prints them."""
    evaluation = result.evaluation
    protocol = evaluation.protocol
    lines = [f"protocol {protocol.name}: {protocol.description} ({protocol.source})",
             f"split {run.split}: {len(evaluation.scores)} expression(s) scored of {run.selected} run, from "
             f"{run.dataset_expressions} in the dataset",
             f"published numbers: none recorded for {protocol.name} on split {run.split}"]
    lines.append(_means_line("overall", evaluation.overall))
    lines += [_means_line(name, means) for name, means in evaluation.subsets.items()]
    return lines


def format_video_metrics(result: VideoBatchEvaluation, run: VideoProtocolRun) -> str:
    """The notes, protocol and headline numbers as the CLI prints them."""
    return "\n".join([*(f"note: {note}" for note in result.notes), *protocol_lines(result, run)])


def _type_name(type_id: int | None) -> str:
    return "" if type_id is None else TYPE_NAMES.get(type_id, f"type {type_id}")


def _csv(result: VideoBatchEvaluation) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id", "video", "expression_id", "type", "expression", "J", "F", "J&F", "frames", "status",
                     "rounds", "objects", "frames_tracked", "seconds"])
    for score in result.evaluation.scores:
        record = result.records.get(score.id)
        writer.writerow([score.id, score.video, score.expression_id, _type_name(score.type_id), score.expression,
                         f"{score.j:.6f}", f"{score.f:.6f}", f"{score.j_and_f:.6f}", len(score.frames),
                         record.status if record else "", record.rounds if record else "",
                         record.objects if record and record.objects is not None else "",
                         record.frames_tracked if record and record.frames_tracked is not None else "",
                         f"{record.seconds:.3f}" if record else ""])
    return buffer.getvalue()


def _document(result: VideoBatchEvaluation, title: str, run: VideoProtocolRun) -> dict:
    document = result.evaluation.to_json()
    document["protocol"].update(split=run.split, expressions_scored=len(result.evaluation.scores),
                                expressions_selected=run.selected, dataset_expressions=run.dataset_expressions,
                                models=result.models, published=None)
    for row in document["expressions"]:
        record = result.records.get(row["id"])
        if record is not None:
            row.update(status=record.status, rounds=record.rounds, objects=record.objects,
                       frames_tracked=record.frames_tracked)
    return {"title": title, "notes": result.notes, **document}


def _means_table(result: VideoBatchEvaluation) -> str:
    evaluation = result.evaluation
    rows = [("overall", evaluation.overall), *evaluation.subsets.items()]
    body = "".join(f"<tr><td>{html.escape(name)}</td><td>{m.expressions}</td><td>{_percent(m.j)}</td>"
                   f"<td>{_percent(m.f)}</td><td>{_percent(m.j_and_f)}</td></tr>" for name, m in rows)
    return f"<table><tr><th>group</th><th>expressions</th><th>J</th><th>F</th><th>J&amp;F</th></tr>{body}</table>"


def _expression_rows(result: VideoBatchEvaluation, items: dict[str, VideoItem], layout: BatchLayout) -> str:
    rows = []
    ordered: Sequence[ExpressionScore] = sorted(result.evaluation.scores, key=lambda s: (s.j_and_f, s.id))
    for score in ordered:
        record = result.records.get(score.id)
        link = ""
        if record is not None and record.trace and score.id in items:
            target = f"../{layout.relative_folder(items[score.id])}/{record.trace}"
            link = f' <a href="{html.escape(target)}">trace</a>'
        facts = (f"{html.escape(record.status)}, {record.rounds} round(s), {record.objects or 0} object(s), "
                 f"{record.frames_tracked or 0} frame(s) tracked" if record else "")
        rows.append(f"<tr><td>{html.escape(score.id)}{link}</td><td>{html.escape(_type_name(score.type_id))}</td>"
                    f"<td>{html.escape(score.expression)}</td><td>{_percent(score.j)}</td><td>{_percent(score.f)}</td>"
                    f"<td>{_percent(score.j_and_f)}</td><td>{len(score.frames)}</td><td>{facts}</td></tr>")
    head = ("<tr><th>id</th><th>type</th><th>expression</th><th>J</th><th>F</th><th>J&amp;F</th><th>frames</th>"
            "<th>run</th></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _page(result: VideoBatchEvaluation, title: str, run: VideoProtocolRun, items: dict[str, VideoItem],
          layout: BatchLayout) -> str:
    notes = "".join(f'<p class="note">{html.escape(note)}</p>' for note in result.notes)
    unscored = "".join(f"<li>{html.escape(u.id)}: {html.escape(u.reason)}</li>" for u in result.evaluation.unscored)
    protocol = html.escape("\n".join(protocol_lines(result, run)))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 70em; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
td:first-child, th:first-child, td:nth-child(3) {{ text-align: left; }}
.note {{ background: #fff3cd; border: 1px solid #e0c36a; padding: 0.6em; font-weight: bold; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
{notes}
<h2>Protocol</h2>
<pre>{protocol}</pre>
<h2>Metrics</h2>
{_means_table(result)}
<p>J: region similarity (IoU of the prediction and the target on a frame, 1 when both are empty); F: contour
accuracy (boundary F-measure within ceil(0.008 x the frame's diagonal) pixels), both as DAVIS defines them; each
expression's J and F are means over every frame of its video, J&amp;F = (J + F) / 2, in %. A run that failed, ran out
of rounds or was stopped counts as nothing predicted. Files: <a href="metrics.json">metrics.json</a>,
<a href="expressions.csv">expressions.csv</a>.</p>
<h2>Expressions, lowest J&amp;F first</h2>
{_expression_rows(result, items, layout)}
<h2>Not scored ({len(result.evaluation.unscored)})</h2>
<ul>{unscored}</ul>
</body></html>
"""


def write_video_report(result: VideoBatchEvaluation, items: Sequence[VideoItem], layout: BatchLayout,
                       folder: str | Path, *, title: str, run: VideoProtocolRun) -> Path:
    """Write the report files (see the module docstring) into ``folder``; returns the path of ``report.html``.

    Args:
        result: the scores (``video_batch.evaluate_video_batch``).
        items: the batch's items (for the links to the traces).
        layout: the batch output.
        folder: where to write (created).
        title: the page title.
        run: the split and counts.

    Raises:
        OSError: the folder cannot be written.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "metrics.json", _document(result, title, run))
    write_text_atomic(folder / "expressions.csv", _csv(result))
    by_id = {item.id: item for item in items}
    return write_text_atomic(folder / "report.html", _page(result, title, run, by_id, layout))
