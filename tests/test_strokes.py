"""Brush strokes drawn once as a round-capped polyline: the same pixels as the rule states, work bounded by the box."""

from __future__ import annotations

import numpy as np
import pytest

from sam3_agent.correct import strokes
from sam3_agent.correct.strokes import stroke_from_view_points


def reference_stroke(points, radius: float, view_scale: float, height: int, width: int) -> np.ndarray:
    """The rule the docstring states, pixel by pixel over the whole image: a pixel centre within the radius of
    some segment (its distance to the nearest point of the segment), with the same 1e-9 px^2 slack on the edge."""
    full = (np.asarray(points, dtype=np.float64) + 0.5) / view_scale - 0.5
    r = radius / view_scale
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float64)
    painted = np.zeros((height, width), dtype=bool)
    for a, b in list(zip(full[:-1], full[1:])) or [(full[0], full[0])]:
        d = b - a
        length2 = float(d @ d)
        t = np.zeros_like(xs) if length2 == 0 else np.clip(((xs - a[0]) * d[0] + (ys - a[1]) * d[1]) / length2, 0, 1)
        painted |= (xs - a[0] - t * d[0]) ** 2 + (ys - a[1] - t * d[1]) ** 2 <= r * r + 1e-9
    return painted


def random_strokes(count: int):
    """Small strokes of every shape the rasteriser distinguishes: whole-pixel points (edges landing exactly on pixel
    centres), fractional ones, repeated points, straight runs, horizontal and vertical segments, several scales."""
    rng = np.random.default_rng(22)
    for _ in range(count):
        n = int(rng.integers(1, 8))
        if rng.random() < 0.5:
            points = rng.integers(-3, 30, size=(n, 2)).astype(np.float64)
            radius = float(rng.integers(1, 6)) * float(rng.choice([0.5, 1.0]))
        else:
            points = rng.uniform(-3, 30, size=(n, 2))
            radius = float(rng.uniform(0.2, 8))
        if n > 3 and rng.random() < 0.5:
            points[2] = points[1]  # a repeated point ...
            points[3] = 2 * points[1] - points[0]  # ... then a straight run through it
        if n > 1 and rng.random() < 0.3:
            points[1, int(rng.integers(0, 2))] = points[0, 0 if rng.random() < 0.5 else 1]
        scale = float(rng.choice([1.0, 0.25, 0.5, 0.37, 2.0]))
        yield points.tolist(), radius, scale, int(rng.integers(5, 40)), int(rng.integers(5, 40))


def test_a_stroke_paints_exactly_the_pixels_within_the_radius_of_its_polyline():
    compared = 0
    for points, radius, scale, height, width in random_strokes(400):
        expected = reference_stroke(points, radius, scale, height, width)
        if not expected.any():
            continue  # wholly outside: refused (tests/test_edits.py)
        got = stroke_from_view_points(points, radius, scale, height, width)
        assert np.array_equal(got, expected), (points, radius, scale, height, width)
        compared += 1
    assert compared == 249  # the other strokes lie wholly outside their image


def counting_spans(monkeypatch) -> list[np.ndarray]:
    """Record the rows of every (segment, row) pair the rasteriser computes a span for."""
    seen: list[np.ndarray] = []
    spans = strokes._capsule_spans

    def counted(constants, rows, r2):
        seen.append(rows.copy())
        return spans(constants, rows, r2)

    monkeypatch.setattr(strokes, "_capsule_spans", counted)
    return seen


def test_the_largest_stroke_the_tab_accepts_costs_one_span_per_segment_and_row(monkeypatch):
    # 20,000 points (correct.MAX_STROKE_POINTS) zigzagging across a 600 x 400 photo shown at full size, with a brush
    # as wide as the view: 19,999 segments each reaching the 400 rows, one span each; a disc per point would have
    # computed 20,000 x 240,000 pixels.
    seen = counting_spans(monkeypatch)
    xs = np.where(np.arange(20_000) % 2 == 0, 0.0, 599.0)
    points = np.stack([xs, np.linspace(0, 399, 20_000)], axis=1).tolist()
    painted = stroke_from_view_points(points, 600, 1.0, 400, 600)
    assert painted.all()
    rows = np.concatenate(seen)
    assert len(rows) == 19_999 * 400
    assert np.array_equal(np.bincount(rows.astype(np.int64)), np.full(400, 19_999))


def test_a_stroke_on_a_large_photo_computes_only_the_rows_of_its_box_and_paints_only_inside_it(monkeypatch):
    # a 3000 x 2000 photo shown at 1024 x 683: a wiggle of 20,000 points around view (100..110, 200..202) with a
    # 2 view px brush. At full size ((v + 0.5) * 3000 / 1024 - 0.5) the points span x 293.93..323.23, y 586.90..592.76
    # and the brush is 5.86 px: pixels x 289..329, rows 582..598.
    seen = counting_spans(monkeypatch)
    t = np.arange(20_000)
    points = np.stack([100 + 10 * (t % 7) / 6, 200 + 2 * (t % 5) / 4], axis=1).tolist()
    scale = 1024 / 3000
    painted = stroke_from_view_points(points, 2, scale, 2000, 3000)
    ys, xs = np.nonzero(painted)
    assert (ys.min(), ys.max(), xs.min(), xs.max()) == (582, 598, 289, 329)
    rows = np.concatenate(seen)
    assert rows.min() == 582 and rows.max() == 598
    assert len(rows) <= 19_999 * (598 - 582 + 1)


@pytest.mark.parametrize("points", [[(5, 5), (5, 5), (5, 5)], [(2, 5), (4, 5), (6, 5), (8, 5)], [(2, 5), (9, 5), (4, 5)],
                                    [(2, 2), (4, 4), (6, 6), (3, 3)]])
def test_repeated_points_straight_runs_and_turns_back_paint_what_their_segments_paint(points):
    assert np.array_equal(stroke_from_view_points(points, 1.5, 1.0, 12, 12),
                          reference_stroke(points, 1.5, 1.0, 12, 12))
