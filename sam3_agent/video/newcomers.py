"""The newcomer mode: objects that enter the clip after (or before) the keyframe, found by SAM 3's detector with the
keyframe run's final phrase and checked by the verifier before they become objects.

While the keyframe's objects are tracked, the detector runs on the frames (every ``detect_every``-th) with the phrase
whose masks the agent selected. A candidate that overlaps an object's mask on that frame (IoU above ``ASSOC_IOU``)
is that object; one that overlaps a candidate already checked is that candidate again (followed from frame to frame,
so one newcomer is checked once); any other is checked by the verifier with the same isolated call and verdict
rules as ``examine_each_mask`` (``agent.verify.verify_masks``), on the frame where it first appears. Accepted, it
becomes an object fixed on that frame (source ``"detector"``) and is tracked both ways once the keyframe's tracking
ends; rejected or unconfirmed (no usable verdict, or the call failed), it is not added. Each check is recorded
(``records.NewcomerCheck``); at most ``max_checks`` per run, since each is a VLM call.

SAM 3's detector is ``Sam3Model``, the same model transformers' ``Sam3VideoModel`` detects with; the association
here is simpler than that model's (no hot start, no re-conditioning of tracks on detections): the agent's objects
are tracked from their masks, and a detection only ever adds a verified newcomer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator, Iterator
from typing import Any

from PIL import Image

from ..agent.verify import RunCancelled, verify_masks
from ..mask_set import Masks
from .events import NewcomerChecked, VideoEvent
from .records import CheckOutcome, NewcomerCheck, VideoTrace
from .tracks import mask_iou

logger = logging.getLogger(__name__)

ASSOC_IOU = 0.1  # assoc_iou_thresh of transformers' Sam3VideoConfig: a detection overlapping a track above it is it
NEW_DETECTION_SCORE = 0.7  # new_det_thresh of Sam3VideoConfig: the detection score a new object needs
DEFAULT_MAX_CHECKS = 10  # verifier calls a run may spend on newcomers (each is one VLM call of ~500 image tokens)


class NewcomerSearch:
    """Finds and checks newcomers frame by frame during the keyframe's tracking (``after_frame``).

    Args:
        agent: the image ``agent.loop.Agent`` (its segmenter detects, its verifier checks).
        trace: the video trace (objects are added to ``trace.tracks``, checks to ``trace.checks``).
        phrase: the keyframe run's final phrase.
        detect_every: run the detector on every n-th frame (frame index divisible by n).
        max_checks: most verifier checks of this search.
        stop: the run's stop event.
    """

    def __init__(self, agent: Any, trace: VideoTrace, phrase: str, detect_every: int, max_checks: int,
                 stop: threading.Event) -> None:
        self.agent = agent
        self.trace = trace
        self.phrase = phrase
        self.detect_every = detect_every
        self.max_checks = max_checks
        self.stop = stop
        self.accepted: list[tuple[int, int]] = []  # (object id, frame) in the order found
        self._followed: list[bytes] = []  # the last mask of each checked candidate
        self._checks = 0

    def after_frame(self, frame: int, image: Image.Image) -> Iterator[VideoEvent]:
        """Detect on ``frame`` (when it is one of every ``detect_every``) and check its unmatched candidates."""
        if frame % self.detect_every or self._checks >= self.max_checks:
            return
        started = time.perf_counter()
        try:
            tracks = self.trace.tracks
            candidates = self.agent.segmenter.segment(image, self.phrase, NEW_DETECTION_SCORE)
            height, width = tracks.height, tracks.width
            objects = [m.counts for m in tracks.masks_on(frame).values()]
            for i, counts in enumerate(candidates.counts):
                if any(mask_iou(counts, other, height, width) > ASSOC_IOU for other in objects):
                    continue
                seen = [j for j, other in enumerate(self._followed) if mask_iou(counts, other, height, width) > ASSOC_IOU]
                if seen:
                    self._followed[seen[0]] = counts  # the same candidate, moved: follow it
                    continue
                if self._checks >= self.max_checks:
                    logger.info("newcomer checks stopped at %d (the run's limit)", self.max_checks)
                    return
                self._checks += 1
                self._followed.append(counts)
                check = self._check(frame, image, candidates.subset([i]))
                yield NewcomerChecked(check)
                objects = [m.counts for m in tracks.masks_on(frame).values()]
        finally:
            self.trace.add_time("newcomers", time.perf_counter() - started)

    def _check(self, frame: int, image: Image.Image, candidate: Masks) -> NewcomerCheck:
        """Verify one candidate on its frame; add it as an object when the verifier accepts it."""
        agent = self.agent
        tools = agent.tools
        try:
            verdicts = _result_of(verify_masks(
                agent.verifier, agent.prompts, image, self.trace.query, candidate, 0,
                max_new_tokens=agent.config.verify_max_new_tokens, stop=self.stop, bounds=tools.verify_bounds,
            ))
            verdict = verdicts[0]
        except RunCancelled:
            verdict = None
        counts, score = candidate.counts[0], float(candidate.scores[0])
        outcome: CheckOutcome
        object_id = None
        if verdict is not None and verdict.verdict == "accept" and verdict.source == "model":
            outcome = "accepted"
            tracks = self.trace.tracks
            object_id = tracks.new_object(self.trace.query)
            tracks.fix(object_id, frame, candidate.mask(0), "detector", score)
            self.accepted.append((object_id, frame))
        elif verdict is not None and verdict.verdict == "reject" and verdict.source == "model":
            outcome = "rejected"
        else:
            outcome = "unconfirmed"
        check = NewcomerCheck(
            frame_index=frame, phrase=self.phrase, counts=counts, score=score,
            verdict=verdict.verdict if verdict is not None else None,
            verdict_source=verdict.source if verdict is not None else None,
            outputs=verdict.outputs if verdict is not None else (), outcome=outcome, object_id=object_id,
            seconds=verdict.seconds if verdict is not None else 0.0,
        )
        self.trace.checks.append(check)
        return check


def _result_of(steps: Generator[Any, None, Any]) -> Any:
    """Run a verification generator to its result without passing its per-mask events on (``NewcomerChecked`` says
    the outcome)."""
    while True:
        try:
            next(steps)
        except StopIteration as finished:
            return finished.value
