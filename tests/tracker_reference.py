"""What the video tracker's tests compare it with: transformers' documented recipe on the same frames."""

from __future__ import annotations

import numpy as np
import torch
from video_frames import box_mask

from sam3_agent.sam.video_tracker import TrackedFrame

PROMPTS = {3: box_mask(40, 20, 110, 70), 7: box_mask(120, 5, 150, 30)}


def transformers_recipe(tracker, frames, prompt_frame, prompts, reverse):
    """transformers' documented recipe: the whole clip in the session, propagate_in_video_iterator, every output kept.
    Returns [(frame index, {id: mask}, {id: score})] for the frames after the prompt frame."""
    model, processor = tracker._model, tracker._processor
    session = processor.init_video_session(video=frames, inference_device="cpu", dtype=torch.float32)
    ids = sorted(prompts)
    processor.add_inputs_to_inference_session(session, frame_idx=prompt_frame, obj_ids=list(ids),  # it takes the list
                                              input_masks=[prompts[i] for i in ids])
    height, width = np.asarray(frames[0]).shape[:2]
    results = []
    for output in model.propagate_in_video_iterator(session, start_frame_idx=prompt_frame, reverse=reverse):
        if output.frame_idx == prompt_frame:
            continue
        masks = processor.post_process_masks([output.pred_masks], [[height, width]])[0][:, 0].numpy()
        scores = torch.sigmoid(output.object_score_logits).reshape(-1).tolist()
        results.append((output.frame_idx, dict(zip(ids, masks)), dict(zip(ids, scores))))
    return results


def as_tuples(tracked: list[TrackedFrame]):
    return [(t.frame_index, t.masks, t.scores) for t in tracked]


def assert_same(ours, reference):
    assert [f for f, _, _ in ours] == [f for f, _, _ in reference]
    for (frame, masks, scores), (_, ref_masks, ref_scores) in zip(ours, reference):
        assert masks.keys() == ref_masks.keys(), frame
        assert all(np.array_equal(masks[i], ref_masks[i]) for i in masks), f"masks differ on frame {frame}"
        assert scores == ref_scores, f"scores differ on frame {frame}"
