"""Agents with known answers for batch and evaluation tests: a scripted VLM that segments a fixed phrase per query and
selects mask 1 (or reports no mask), over ``conftest.KnownSegmenter``'s rectangles."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from conftest import KnownSegmenter, tool

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.prompts import load_prompts
from sam3_agent.messages import Message
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.vlm.scripted import ScriptedVLM

ASSETS = ASSETS_DIR  # the photos the package ships
FIXTURES = Path(__file__).resolve().parent / "data" / "datasets"
PHOTOS = ("astronaut.jpg", "coffee.jpg", "chelsea.jpg", "rocket.jpg")
QUERIES = ("the flag", "the cup", "the cat's ear", "the rocket", "the person")


def twenty_items(folder: Path) -> Path:
    """The 20-item batch as a JSONL file in ``folder``: every query on every asset photo."""
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps({"image": str(ASSETS / p), "query": q}) + "\n" for p in PHOTOS for q in QUERIES))
    return path


def segment_and_select_script(folder: Path) -> Path:
    """A script file: segment "object", then select mask 1 (two rounds per item)."""
    path = folder / "script.json"
    path.write_text(json.dumps({"main": [tool("segment_phrase", text_prompt="object"),
                                         tool("select_masks_and_return", final_answer_masks=[1])]}))
    return path


def answer_script(phrases: dict[str, str | None]) -> Callable[[Sequence[Message]], str]:
    """A scripted VLM function: for the query ``q`` of the run, segment ``phrases[q]`` then select mask 1; when
    ``phrases[q]`` is ``None``, report no mask at once."""
    prompts = load_prompts()
    first_turns = {prompts.format("initial_user", query=q): q for q in phrases}

    def respond(messages: Sequence[Message]) -> str:
        query = first_turns[messages[1].text]
        if phrases[query] is None:
            return tool("report_no_mask", thinking="nothing matches")
        segmented = any(m.role == "assistant" and m.call is not None and m.call.name == "segment_phrase"
                        for m in messages)
        if segmented:
            return tool("select_masks_and_return", final_answer_masks=[1])
        return tool("segment_phrase", text_prompt=phrases[query])

    return respond


class KnownAgents:
    """An ``AgentSource`` whose agents answer as ``answer_script(phrases)`` over ``KnownSegmenter(detections)``.

    Attributes:
        created: how many agents were made (one per item run).
        interrupt_at: when the ``created``-th agent is made, Ctrl-C is simulated in the main thread.
        piece_delay: seconds between streamed pieces of the scripted replies.
    """

    def __init__(self, phrases: dict[str, str | None], detections: dict, *, interrupt_at: int | None = None,
                 piece_delay: float = 0.0, failing: Sequence[str] = ()) -> None:
        self.respond = answer_script(phrases)
        self.segmenter = KnownSegmenter(detections, failing=failing)
        self.interrupt_at = interrupt_at
        self.piece_delay = piece_delay
        self.created = 0
        self._lock = threading.Lock()
        self.in_flight_now = 0
        self.most_in_flight = 0

    def new_agent(self) -> Agent:
        delay = self.piece_delay
        with self._lock:
            self.created += 1
            if self.created == self.interrupt_at:
                # Ctrl-C arriving in a worker thread (the harder case: the main thread must still notice it);
                # this item then streams slowly, so it is still in flight when the batch stops
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)
                delay = 0.1
        vlm = ScriptedVLM(self.respond, name="scripted", piece_delay=delay)
        return Agent(vlm, self.segmenter, AgentConfig(max_rounds=4), settings={"preset": "test"})

    def in_flight(self):
        agents = self

        class _Mark:
            def __enter__(self) -> None:
                with agents._lock:
                    agents.in_flight_now += 1
                    agents.most_in_flight = max(agents.most_in_flight, agents.in_flight_now)

            def __exit__(self, *exc: object) -> None:
                with agents._lock:
                    agents.in_flight_now -= 1

        return _Mark()


REVIEW_PHRASES = {"the cup": "cup", "the dog": None, "the flag": "flag"}
REVIEW_DETECTIONS = {"cup": [((200, 40, 420, 310), 0.9)], "flag": [((0, 0, 95, 340), 0.8)]}


def review_batch(folder: Path) -> Path:
    """A batch output for review tests, run by the batch code with a scripted VLM over known rectangles: ``cup``
    (coffee.jpg, one mask: the box (200, 40, 420, 310)), ``dog`` (chelsea.jpg, no mask), ``flag`` (astronaut.jpg, one
    mask: the box (0, 0, 95, 340)) and ``lost`` (a missing photo: failed, no trace). Returns the output folder."""
    from sam3_agent.datasets.batch.items import read_items
    from sam3_agent.datasets.batch.layout import BatchLayout
    from sam3_agent.datasets.batch.runner import run_batch

    folder.mkdir(parents=True, exist_ok=True)
    lines = [{"id": "cup", "image": str(ASSETS / "coffee.jpg"), "query": "the cup"},
             {"id": "dog", "image": str(ASSETS / "chelsea.jpg"), "query": "the dog"},
             {"id": "flag", "image": str(ASSETS / "astronaut.jpg"), "query": "the flag"},
             {"id": "lost", "image": str(folder / "missing.jpg"), "query": "the cup"}]
    listing = folder / "items.jsonl"
    listing.write_text("".join(json.dumps(line) + "\n" for line in lines))
    items = read_items(listing)
    out = folder / "out"
    layout = BatchLayout(out, items)
    layout.prepare()
    run_batch(items, layout, KnownAgents(REVIEW_PHRASES, REVIEW_DETECTIONS))
    return out
