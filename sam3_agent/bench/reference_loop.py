"""The reference for the non-model benchmark: Meta's ``sam3`` 0.1.4 agent loop on the same scene.

Run by an interpreter that has ``sam3`` 0.1.4 installed (its own venv; nothing of it is part of this project):
``PYTHON sam3_agent/bench/reference_loop.py --case W H N`` prints ``{"cpu": seconds}``, the best of ``--repeat``
runs of ``sam3.agent.inference.run_single_image_inference`` (its agent loop and everything it writes) with a
zero-cost SAM 3 (``set_image`` / ``set_text_prompt`` hand over the scene's full-size masks, computed before timing)
and a replayed VLM (both phrases, examine, select every mask; the verifier accepts). With ``--postprocess`` the
stand-in is given the same work as ours (``sam_outputs``): it hands over the scene's mask logits at SAM 3's mask
resolution (``scene.mask_logits``) after the reference's own post-processing of them, the steps of its
``Sam3Processor._forward_grounding`` (its ``data_misc.interpolate`` to the photo's size, bilinear, then sigmoid and
> 0.5), inside the measured time. With ``--requests DIR`` it runs once
and writes every request the loop sent to its VLM into ``DIR/requests.json`` (messages as the loop built them, each
image path replaced by a copy named by its content, in ``DIR``), which ``bench.tokens`` counts; if the loop fails, the
requests it sent until then are written with its error (at 100 masks it cannot save the overlay of the masks it
kept: their numbers, joined, make a file name longer than the system allows).

The wheel's package ``__init__`` builds the model (and needs packages the agent loop does not); the loop is
imported without it. The wheel ships no prompt files: placeholders are written beside it (the replayed VLM
never reads them).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import importlib.util
import io
import json
import os
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

if __package__:
    from .scene import PHRASES, QUERY, detections, mask_logits, photo_file
else:  # run as a file by the reference's own interpreter (see above): load the scene beside it by path
    _spec = importlib.util.spec_from_file_location("scene", Path(__file__).with_name("scene.py"))
    _scene = sys.modules["scene"] = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
    _spec.loader.exec_module(_scene)  # type: ignore[union-attr]
    PHRASES, QUERY, detections, photo_file = _scene.PHRASES, _scene.QUERY, _scene.detections, _scene.photo_file
    mask_logits = _scene.mask_logits
SCORE_THRESHOLD = 0.5  # the reference processor's confidence_threshold (and ours): the masks it upsamples

CHECK_PROMPT = "placeholder verification system prompt"
MAIN_PROMPT = "placeholder system prompt"


def load_reference() -> types.ModuleType:
    """``sam3.agent.inference``, imported without ``sam3/__init__.py``."""
    spec = importlib.util.find_spec("sam3")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("this interpreter has no sam3 package: pip install --no-deps sam3==0.1.4 iopath portalocker")
    package = types.ModuleType("sam3")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["sam3"] = package
    prompts = Path(package.__path__[0]) / "agent" / "system_prompts"
    prompts.mkdir(exist_ok=True)
    for name, text in (("system_prompt.txt", MAIN_PROMPT),
                       ("system_prompt_iterative_checking.txt", CHECK_PROMPT)):
        if not (prompts / name).exists():
            (prompts / name).write_text(text)
    import sam3.agent.inference as inference

    global _CHECK_TEXT
    _CHECK_TEXT = (prompts / "system_prompt_iterative_checking.txt").read_text().strip()  # as the loop reads it
    return inference


_CHECK_TEXT = CHECK_PROMPT  # the verification system prompt the loop sends (a placeholder unless real files exist)


class FakeProcessor:
    """SAM 3's image processor API with answers computed beforehand: no model cost. An answer holding
    ``masks_logits_small`` (float (N, 288, 288)) is post-processed as the reference's processor does, when asked."""

    def __init__(self, answers: dict) -> None:
        self.answers = answers

    def set_image(self, image: object) -> dict:
        return {}

    def set_text_prompt(self, state: dict, prompt: str) -> dict:
        answer = dict(self.answers[prompt])
        small = answer.pop("masks_logits_small", None)
        if small is not None:  # the steps of the reference's Sam3Processor._forward_grounding after its model
            from sam3.model.data_misc import interpolate

            height, width = answer.pop("size")
            probabilities = interpolate(small.unsqueeze(1), (height, width), mode="bilinear",
                                        align_corners=False).sigmoid()
            answer["masks_logits"] = probabilities
            answer["masks"] = probabilities > 0.5
        return answer


def answers_for(width: int, height: int, count: int, postprocess: bool = False) -> dict:
    """Per phrase what the stand-in hands over: the kept blobs' full-size masks, or with ``postprocess`` their mask
    logits (``scene.mask_logits``) to be post-processed inside the measured time; boxes and scores either way."""
    import torch

    out = {}
    for phrase in PHRASES:
        blobs = [b for b in detections(width, height, count, phrase) if b.score >= SCORE_THRESHOLD]
        boxes = torch.tensor([b.box(width, height) for b in blobs], dtype=torch.float32)
        scores = torch.tensor([b.score for b in blobs], dtype=torch.float32)
        out[phrase] = {"boxes": boxes, "scores": scores}
        if postprocess:
            out[phrase].update(masks_logits_small=torch.from_numpy(mask_logits(blobs, width, height)),
                               size=(height, width))
        else:
            out[phrase]["masks"] = torch.from_numpy(np.stack([b.mask(width, height) for b in blobs])[:, None])
    return out


def replay(count: int, messages: list) -> str:
    """The same script as ``nonmodel_run.ReplayVLM``, read from the reference's message dicts."""
    if messages[0]["content"] == _CHECK_TEXT:
        return "<think>ok</think><verdict>Accept</verdict>"
    calls = []
    for message in messages:
        if message["role"] == "assistant":
            text = message["content"][0]["text"]
            calls.append(json.loads(text.split("<tool>")[-1].split("</tool>")[0]))
    if not calls:
        step = {"name": "segment_phrase", "parameters": {"text_prompt": PHRASES[0]}}
    elif calls[-1]["name"] == "segment_phrase" and calls[-1]["parameters"]["text_prompt"] == PHRASES[0]:
        step = {"name": "segment_phrase", "parameters": {"text_prompt": PHRASES[1]}}
    elif calls[-1]["name"] == "segment_phrase":
        step = {"name": "examine_each_mask", "parameters": {}}
    else:
        step = {"name": "select_masks_and_return", "parameters": {"final_answer_masks": list(range(1, count + 1))}}
    return f"<think>ok</think><tool>{json.dumps(step)}</tool>"


class RequestLog:
    """Every request the loop sends, in order, with its images copied into ``folder`` under content names (the
    loop overwrites some of its files from one phrase to the next)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.requests: list[list[dict]] = []
        self.error: str | None = None  # how the loop failed, if it did (the requests sent until then are kept)

    def _copy(self, path: str) -> str:
        data = Path(path).read_bytes()
        name = hashlib.sha256(data).hexdigest()[:16] + Path(path).suffix.lower()
        if not (self.folder / name).exists():
            shutil.copyfile(path, self.folder / name)
        return name

    def record(self, messages: list) -> None:
        request = []
        for message in messages:
            content = message["content"]
            if isinstance(content, list):
                content = [{"type": "image", "image": self._copy(c["image"])} if c.get("type") == "image" else dict(c)
                           for c in content]
            request.append({"role": message["role"], "content": content})
        self.requests.append(request)

    def replay(self, count: int, messages: list) -> str:
        self.record(messages)
        return replay(count, messages)

    def write(self) -> None:
        (self.folder / "requests.json").write_text(json.dumps(
            {"main_prompt_placeholder": MAIN_PROMPT, "check_prompt_placeholder": CHECK_PROMPT,
             "requests": self.requests, "error": self.error}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", type=int, nargs=3, metavar=("W", "H", "MASKS"), required=True)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--requests", type=Path, help="run once and write every request sent to the VLM here")
    parser.add_argument("--postprocess", action="store_true",
                        help="hand over mask logits post-processed by the reference's own steps, inside the time")
    args = parser.parse_args()
    width, height, count = args.case
    inference = load_reference()
    from sam3.agent.client_sam3 import call_sam_service

    answers = answers_for(width, height, count, args.postprocess)
    best = float("inf")
    with tempfile.TemporaryDirectory(prefix="sam3_reference_") as tmp:
        photo = Path(tmp) / "photo.jpg"
        photo.write_bytes(photo_file(width, height))
        log = RequestLog(args.requests) if args.requests else None
        for run in range(1 if log else args.repeat):
            out = Path(tmp) / f"run{run}"
            service = functools.partial(call_sam_service, FakeProcessor(answers))
            vlm = functools.partial(log.replay if log else replay, count)
            started = time.process_time()
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    inference.run_single_image_inference(str(photo), QUERY, {"name": "replay"}, vlm, service,
                                                         str(out))
            except Exception as error:  # noqa: BLE001 - the reference's own failure, reported with what it sent
                if not log:
                    raise
                log.error = f"{type(error).__name__}: {error}"
                break
            best = min(best, time.process_time() - started)
            if not any(out.glob("*_pred.json")):
                raise SystemExit("the reference run wrote no prediction: it did not finish")
        if log:
            log.write()
    sys.stdout.write(json.dumps({"cpu": best}) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    raise SystemExit(main())
