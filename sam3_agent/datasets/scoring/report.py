"""The evaluation report: ``metrics.json``, ``samples.csv``, ``report.html`` with plots and the worst cases.

Written into one folder (``OUT/eval`` by the CLI), every file atomically::

    report.html          the protocol, split and sample counts beside the published numbers (``protocols``),
                         metrics, precision at IoU thresholds, breakdowns, plots, worst cases, unscored samples,
                         frame notes (``frames``: photos with an EXIF orientation)
    metrics.json         the same numbers (``Metrics.to_json``, ``ProtocolRun.to_json``) for scripts, the unscored
                         samples, the frame notes
    samples.csv          one row per scored sample: IoU, I, U, pixels, status, rounds, mistakes, attributes, note
    plots/iou_histogram.png, plots/iou_vs_rounds.png      (matplotlib, Agg backend)
    worst/NNN.png        overlays of the worst samples: target only green, prediction only red, both yellow,
                         ignored grey

When the models were random or scripted (``Evaluation.notes``), the report says so at the top, in the JSON and
printed summary too: such numbers test the code, they are not results.
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from ...errors import InputError
from ...images import load_image
from ...imaging.draw import blend_fill
from ..batch.files import remove_leftovers, write_bytes_atomic, write_json_atomic, write_text_atomic
from ..batch.layout import BatchLayout
from ..formats.ground_truth import EvalSample
from .evaluate import Evaluation, prediction_mask
from .frames import upright_truth
from .metrics import Metrics, SampleScore
from .protocols import ProtocolRun

OVERLAY_LONG_SIDE = 480  # px: worst-case overlays are shown scaled down to this
TARGET_ONLY, PREDICTED_ONLY, BOTH, IGNORED = (40, 200, 60), (230, 40, 40), (250, 210, 30), (128, 128, 128)


def _number(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def format_metrics(metrics: Metrics, notes: Sequence[str] = ()) -> str:
    """The headline metrics as a few lines of text (what the CLI prints)."""
    lines = [f"note: {note}" for note in notes]
    lines.append(f"samples {metrics.samples}: gIoU {_number(metrics.giou)}, cIoU {_number(metrics.ciou)}")
    lines.append("precision@IoU (samples with a target): "
                 + ", ".join(f"{t:.1f} {_number(p)}" for t, p in metrics.precision.items()))
    if metrics.no_target_samples:
        lines.append(f"no-target accuracy {_number(metrics.no_target_accuracy)} "
                     f"over {metrics.no_target_samples} sample(s) without a target")
    lines.append(f"samples with a target answered with nothing: {metrics.empty_on_target} of {metrics.target_samples}")
    return "\n".join(lines)


def overlay(image: Image.Image, prediction: np.ndarray, target: np.ndarray, ignore: np.ndarray) -> Image.Image:
    """The image with the target only in green, the prediction only in red, both in yellow, ignored pixels grey
    (fills blended with ``imaging.draw.blend_fill``), scaled to at most ``OVERLAY_LONG_SIDE`` px."""
    pixels = np.array(image.convert("RGB"), dtype=np.uint8)
    for region, color in ((target & ~prediction, TARGET_ONLY), (prediction & ~target, PREDICTED_ONLY),
                          (prediction & target, BOTH), (ignore, IGNORED)):
        pixels[region] = blend_fill(pixels[region], color)
    result = Image.fromarray(pixels)
    result.thumbnail((OVERLAY_LONG_SIDE, OVERLAY_LONG_SIDE))
    return result


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _plots(scores: Sequence[SampleScore], folder: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    written = []
    ious = [s.iou for s in scores]
    figure, axes = plt.subplots(figsize=(5, 3.2))
    axes.hist(ious, bins=np.linspace(0, 1, 11), color="#4a78b5", edgecolor="white")
    axes.set_xlabel("IoU")
    axes.set_ylabel("samples")
    axes.set_title("IoU per sample")
    figure.tight_layout()
    written.append(_save_figure(figure, folder / "iou_histogram.png"))
    figure, axes = plt.subplots(figsize=(5, 3.2))
    rounds = [s.rounds for s in scores]
    axes.scatter(rounds, ious, s=14, alpha=0.6, color="#4a78b5", label="sample")
    by_rounds: dict[int, list[float]] = {}
    for r, value in zip(rounds, ious):
        by_rounds.setdefault(r, []).append(value)
    xs = sorted(by_rounds)
    axes.plot(xs, [float(np.mean(by_rounds[x])) for x in xs], color="#d0504a", marker="o", label="mean")
    axes.set_xlabel("rounds")
    axes.set_ylabel("IoU")
    axes.set_ylim(-0.05, 1.05)
    axes.set_title("IoU vs rounds")
    axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    written.append(_save_figure(figure, folder / "iou_vs_rounds.png"))
    plt.close("all")
    return written


def _save_figure(figure: object, path: Path) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)  # type: ignore[attr-defined]
    write_bytes_atomic(path, buffer.getvalue())
    return path.name


def _csv(scores: Sequence[SampleScore]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id", "query", "iou", "intersection", "union", "target_pixels", "predicted_pixels", "no_target",
                     "status", "rounds", "mistakes", "seconds", "attributes", "note"])
    for s in scores:
        writer.writerow([s.id, s.query, f"{s.iou:.6f}", s.intersection, s.union, s.target_pixels, s.predicted_pixels,
                         int(s.no_target), s.status, s.rounds,
                         ";".join(f"{k}:{v}" for k, v in sorted(s.mistakes.items())),
                         f"{s.seconds:.3f}", ";".join(f"{k}={v}" for k, v in sorted(s.attributes.items())), s.note])
    return buffer.getvalue()


def _metrics_rows(groups: dict[str, Metrics]) -> str:
    rows = []
    for name, m in groups.items():
        rows.append(
            f"<tr><td>{html.escape(name)}</td><td>{m.samples}</td><td>{_number(m.giou)}</td><td>{_number(m.ciou)}</td>"
            + "".join(f"<td>{_number(p)}</td>" for p in m.precision.values())
            + f"<td>{_number(m.no_target_accuracy)}</td><td>{_number(m.mean_rounds, 2)}</td></tr>"
        )
    return "\n".join(rows)


def _table(groups: dict[str, Metrics]) -> str:
    any_metrics = next(iter(groups.values()), None)
    thresholds = any_metrics.precision if any_metrics else {}
    head = ("<tr><th>group</th><th>samples</th><th>gIoU</th><th>cIoU</th>"
            + "".join(f"<th>P@{t:.1f}</th>" for t in thresholds) + "<th>no-target acc.</th><th>mean rounds</th></tr>")
    return f"<table>{head}\n{_metrics_rows(groups)}</table>"


def _metrics_document(evaluation: Evaluation, title: str, protocol: ProtocolRun | None) -> dict:
    """What ``metrics.json`` holds: the protocol, the metrics, every breakdown, the unscored samples and the notes."""
    return {
        "title": title,
        "notes": evaluation.notes,
        "deviations": evaluation.deviations,
        "protocol": None if protocol is None else protocol.to_json(evaluation.metrics),
        "metrics": evaluation.metrics.to_json(),
        "breakdowns": {name: {g: m.to_json() for g, m in groups.items()}
                       for name, groups in evaluation.breakdowns.items()},
        "unscored": [{"id": u.id, "reason": u.reason} for u in evaluation.unscored],
        "frame_notes": [{"id": s.id, "note": s.note} for s in evaluation.scores if s.note],
    }


def _worst_figure(number: int, score: SampleScore, sample: EvalSample, layout: BatchLayout, folder: Path) -> str:
    """One worst case as an HTML ``<figure>``: its overlay (written as ``worst/NNN.png``) and a caption linking
    its trace; a sample whose image or ground truth cannot be read gets a line saying why instead of a picture."""
    item = sample.item()
    record = layout.read_record(item)
    caption = (f"<b>{html.escape(score.id)}</b>: {html.escape(score.query)}<br>IoU {score.iou:.3f}, "
               f"{html.escape(score.status)}, {score.rounds} round(s)")
    if record is not None and record.trace:
        link = f"../{layout.relative_folder(item)}/{record.trace}"
        caption += f' &middot; <a href="{html.escape(link)}">trace</a>'
    try:
        image = load_image(sample.image)
        target, ignore, _note = upright_truth(sample, image.height, image.width)
        predicted = prediction_mask(record, image.height, image.width) if record else np.zeros_like(target)
        name = f"worst/{number:03d}.png"
        write_bytes_atomic(folder / name, _png(overlay(image, predicted, target, ignore)))
        picture = f'<img src="{name}" alt="overlay of {html.escape(score.id)}">'
    except (InputError, ValueError) as error:
        picture = f"<p>(no overlay: {html.escape(str(error))})</p>"
    return f"<figure>{picture}<figcaption>{caption}</figcaption></figure>"


def _worst_figures(scores: Sequence[SampleScore], samples: Sequence[EvalSample], layout: BatchLayout, folder: Path,
                   worst: int) -> list[str]:
    """The ``worst`` lowest-IoU samples (ties by id) as figures, lowest first."""
    by_id = {s.id: s for s in samples}
    return [_worst_figure(number, score, by_id[score.id], layout, folder)
            for number, score in enumerate(sorted(scores, key=lambda s: (s.iou, s.id))[:worst], start=1)]


def _page(evaluation: Evaluation, title: str, plots: Sequence[str], figures: Sequence[str],
          protocol: ProtocolRun | None) -> str:
    """``report.html``: notes, protocol, metrics, breakdowns, plots, worst cases and the unscored samples."""
    protocol_html = "" if protocol is None else (
        "<h2>Protocol</h2><pre>" + html.escape("\n".join(protocol.lines(evaluation.metrics))) + "</pre>")
    notes_html = "".join(f'<p class="note">{html.escape(note)}</p>' for note in evaluation.notes)
    deviations_html = "".join(f"<li>{html.escape(line)}</li>" for line in evaluation.deviations) or "<li>none recorded</li>"
    unscored_html = "".join(f"<li>{html.escape(u.id)}: {html.escape(u.reason)}</li>" for u in evaluation.unscored)
    frame_html = "".join(f"<li>{html.escape(s.id)}: {html.escape(s.note)}</li>" for s in evaluation.scores if s.note)
    breakdown_html = "".join(f"<h3>by {html.escape(name)}</h3>{_table(groups)}"
                             for name, groups in evaluation.breakdowns.items() if groups)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 70em; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
.note {{ background: #fff3cd; border: 1px solid #e0c36a; padding: 0.6em; font-weight: bold; }}
figure {{ display: inline-block; width: 31%; margin: 0.5em; vertical-align: top; }}
figure img {{ max-width: 100%; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
{notes_html}
{protocol_html}
<h2>Metrics</h2>
<pre>{html.escape(format_metrics(evaluation.metrics))}</pre>
{_table({"all": evaluation.metrics})}
<p>gIoU: mean of per-sample IoU (1 when there is no target and nothing was predicted); cIoU: cumulative
intersection over cumulative union; P@t: fraction of samples with a target whose IoU &ge; t. Failed runs and
runs that ran out of rounds count as empty answers. Files: <a href="metrics.json">metrics.json</a>,
<a href="samples.csv">samples.csv</a>.</p>
<h2>Deviations from the reference agent</h2>
<p>Where these runs differed from the agent whose accuracy the SAM 3 paper reports, and in how many runs (what each
is, why and what it costs: docs/reference.md).</p>
<ul>{deviations_html}</ul>
<h2>Breakdowns</h2>
{breakdown_html}
<h2>Plots</h2>
{"".join(f'<img src="plots/{p}" alt="{html.escape(p)}">' for p in plots)}
<h2>Worst cases</h2>
<p>Green: target only; red: prediction only; yellow: both; grey: ignored.</p>
{"".join(figures)}
<h2>Not scored ({len(evaluation.unscored)})</h2>
<ul>{unscored_html}</ul>
<h2>Frame notes (photos with an EXIF orientation)</h2>
<ul>{frame_html}</ul>
</body></html>
"""


def write_report(
    evaluation: Evaluation,
    samples: Sequence[EvalSample],
    layout: BatchLayout,
    folder: str | Path,
    *,
    title: str = "SAM3 Agent evaluation",
    worst: int = 8,
    protocol: ProtocolRun | None = None,
) -> Path:
    """Write the report files (see the module docstring) into ``folder``; returns the path of ``report.html``.

    Args:
        evaluation: the scores (``evaluate.evaluate``).
        samples: the dataset's samples (for images and ground truth of the worst cases).
        layout: the batch output (for the answers and links to the traces).
        folder: where to write (created).
        title: the page title (e.g. the dataset's name and format).
        worst: how many of the lowest-IoU samples to show with overlays.
        protocol: how the samples were chosen, the split and the published numbers (``protocols``).

    Raises:
        OSError: the folder cannot be written.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for own in (folder, folder / "plots", folder / "worst"):  # folders only the report writes
        remove_leftovers(own)
    scores = evaluation.scores
    write_json_atomic(folder / "metrics.json", _metrics_document(evaluation, title, protocol))
    write_text_atomic(folder / "samples.csv", _csv(scores))
    plots = _plots(scores, folder / "plots") if scores else []
    figures = _worst_figures(scores, samples, layout, folder, worst)
    return write_text_atomic(folder / "report.html", _page(evaluation, title, plots, figures, protocol))
