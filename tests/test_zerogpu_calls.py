"""ZeroGPU per model call: each VLM request, SAM 3 call, verification batch and point click asks for its own GPU
seconds, sized from its work; the agent loop holds no GPU; ZeroGPU's refusals reach the visitor in words.

The scripted run goes through the app's own wrapping (``AgentFactory.calls_on_gpu``) in a fresh interpreter with the
stand-in ``spaces`` (tests/zerogpu_standin), which pickles every call's arguments and results as the real one does
and checks each request against a quota as the real client does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
from PIL import Image

from sam3_agent.errors import InputError
from sam3_agent.messages import Generation, ImagePart, Message, TextPart
from sam3_agent.models import zerogpu
from sam3_agent.models.gpu_calls import GpuVLM, prompt_tokens, vlm_seconds
from sam3_agent.models.zerogpu import GpuQuotaError, quota_error

ROOT = Path(__file__).resolve().parents[1]
STANDIN = Path(__file__).resolve().parent / "zerogpu_standin"

RUN = """
import json, sys, types
import app                                     # what the Space runs: spaces first
import spaces
from sam3_agent.agent.parsing import format_response, parse_response
from sam3_agent.presets import BackendSettings, build_backends
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.settings import AppSettings
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.scripted import ScriptedVLM, load_script


class ScriptedLocal(ScriptedVLM):
    '''Scripted replies from a VLM that says its token budget and batches, as a local model does.'''

    def __init__(self, responses, budget, name):
        super().__init__(responses, name=name)
        self.decoding = types.SimpleNamespace(max_new_tokens=budget)

    def generate_batch(self, conversations, *, max_new_tokens=None, stop=None):
        return [generate(self, c, max_new_tokens=max_new_tokens, stop=stop) for c in conversations]

    def with_tools(self, tools):
        views.append(self.name)                 # made where the calls run (the stand-in runs them in this process)
        return super().with_tools(tools)


def in_xml(reply):
    parsed = parse_response(reply)
    return format_response(parsed.thinking, parsed.call, "xml")


script = load_script("sam3_agent/assets/example_script.json")
tiny = build_backends(BackendSettings(preset="tiny", device="cpu"))
spaces.quota.update(json.loads(sys.argv[1]))
runs = {}
for tool_format in sys.argv[2].split(","):    # one run per tool format, one after the other
    views, first_call = [], len(spaces.record["calls"])
    main = script["main"] if tool_format == "reference" else [in_xml(reply) for reply in script["main"]]
    backends = type(tiny)(ScriptedLocal(main, 512, "main"), ScriptedLocal(script["verify"], 256, "verify"),
                          tiny.segmenter, dict(tiny.settings))
    factory = AgentFactory(AppSettings(backend=BackendSettings(preset="tiny"), tool_format=tool_format), backends)
    factory.calls_on_gpu()                      # what AgentFactory.load does on ZeroGPU
    pages = list(Handlers(factory).run("sam3_agent/assets/coffee.jpg", "the spoon", 8, 0.0, None))
    calls = spaces.record["calls"][first_call:]
    runs[tool_format] = {
        "calls": [[c["work"], c["duration"]] for c in calls],
        "largest_call_bytes": max(c["bytes"] for c in calls),
        "gpu_functions": [name for name, _ in spaces.record["gpu_functions"]],
        "forward_outside_gpu": spaces.record["forward_outside_gpu"],
        "status": pages[-1][0],
        "tool_views": views,
    }
print(json.dumps(runs))
"""


def scripted_runs(quota: dict, tool_formats: str = "reference") -> dict:
    env = dict(os.environ, SPACES_ZERO_GPU="true", PYTHONPATH=os.pathsep.join([str(STANDIN), str(ROOT)]))
    env.pop("SAM3_AGENT_GPU_MAX_SECONDS", None)
    result = subprocess.run([sys.executable, "-c", RUN, json.dumps(quota), tool_formats], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def visitor_runs():
    return scripted_runs({}, "reference,native")  # one interpreter for both: the tiny models load once


@pytest.fixture(scope="module")
def visitor_run(visitor_runs):
    return visitor_runs["reference"]


@pytest.fixture(scope="module")
def native_run(visitor_runs):
    return visitor_runs["native"]


def test_each_model_call_asks_for_its_own_seconds(visitor_run):
    # segment_phrase (main call, SAM 3), examine_each_mask (main call, one verification), select (main call);
    # a main call's seconds grow with its prompt's tokens
    assert visitor_run["calls"] == [["vlm.stream", 32], ["sam3.segment", 15], ["vlm.stream", 33],
                                    ["verifier.stream", 22], ["vlm.stream", 33]]
    assert "Done: 1 mask selected after 3 rounds." in visitor_run["status"]


def test_all_calls_share_one_gpu_function_and_no_model_travels(visitor_run):
    assert visitor_run["gpu_functions"] == ["on_gpu"]  # one pool of GPU workers: weights moved once per worker
    assert visitor_run["largest_call_bytes"] < 1_000_000  # the photo and messages; the tiny SAM 3 alone is 7.6 MB


def test_the_agent_loop_runs_no_model_outside_a_gpu_call(visitor_run):
    assert visitor_run["forward_outside_gpu"] == []


def test_the_native_format_runs_on_zerogpu_its_schema_sent_with_each_main_call(native_run, visitor_run):
    # the same run in the native format: each main call carries the schema (its few hundred tokens asked for too),
    # the worker makes the VLM's schema view once, the verifier never gets one
    assert native_run["calls"] == [["vlm.stream", 33], ["sam3.segment", 15], ["vlm.stream", 33],
                                   ["verifier.stream", 22], ["vlm.stream", 33]]
    assert "Done: 1 mask selected after 3 rounds." in native_run["status"]
    assert native_run["tool_views"] == ["main", "main"]  # once in the main process (checked there), once in the worker
    assert native_run["gpu_functions"] == ["on_gpu"] and native_run["forward_outside_gpu"] == []
    assert visitor_run["largest_call_bytes"] < native_run["largest_call_bytes"] < 1_000_000  # the schema, by value


def test_a_visitor_whose_quota_is_used_up_is_told_to_log_in_or_come_back():
    run = scripted_runs({"left": 40})["reference"]  # the first call asks 32 s, counted 48 s on the half slice
    assert run["calls"] == [["vlm.stream", 32]]
    assert ("Failed after 1 round: your GPU time on this Space is used up for today (40 s left, too little for the "
            "next step): log in to Hugging Face for more GPU time, or try again in 13:20:05.") in run["status"]
    assert "Error" not in run["status"] and "Traceback" not in run["status"]


class Refusal(Exception):
    """What ``spaces`` raises: a Gradio error with a title and a message."""

    def __init__(self, title: str, message: str) -> None:
        super().__init__(message)
        self.title, self.message = title, message


def test_an_illegal_duration_says_to_log_in():
    said = quota_error(Refusal("ZeroGPU illegal duration",
                               "The requested GPU duration (90s) is larger than the maximum allowed"))
    assert isinstance(said, GpuQuotaError)
    assert str(said) == (
        "ZeroGPU refused this step: it asks for more GPU time at once than a visitor of your tier may use (The "
        "requested GPU duration (90s) is larger than the maximum allowed). Log in to Hugging Face for more GPU time "
        "(anonymous visitors get the least), or lower the Space's token budget (SAM3_AGENT_MAX_NEW_TOKENS).")


def test_a_space_out_of_anonymous_gpu_time_says_to_log_in_or_come_back_tomorrow():
    said = quota_error(Refusal("ZeroGPU quota exceeded", "Space app has reached its GPU limit. Try re-running "
                                                         "outside of examples if it happened after clicking one"))
    assert str(said) == ("this Space has no GPU time left for visitors without a Hugging Face login: log in to "
                         "Hugging Face for more GPU time, or try again tomorrow")


def test_no_gpu_free_in_time_says_to_try_again_soon():
    said = quota_error(Refusal("ZeroGPU queue timeout", "No GPU was available after 60s"))
    assert str(said).startswith("no GPU of this Space was free in time: try again in a minute")


def test_other_errors_are_not_taken_for_refusals():
    assert quota_error(RuntimeError("CUDA error")) is None
    assert quota_error(Refusal("Upload failed", "too big")) is None


def test_durations_follow_the_work():
    # 10 s to start, prompt tokens at 2000/s, new tokens at 25/s (+10 % per further row of a batch)
    assert vlm_seconds(2000, 500) == 31.0
    assert vlm_seconds(4000, 250, rows=3) == pytest.approx(10 + 2 + 10 * 1.2)
    photo = Image.new("RGB", (2000, 1000))
    messages = [Message("user", (ImagePart(photo, "raw"), TextPart("x" * 30)))]
    assert prompt_tokens(messages, max_pixels=784 * 100) == 100 + 10  # the image fitted to max_pixels


class Streaming:
    name = "streaming"
    decoding = types.SimpleNamespace(max_new_tokens=50)

    def __init__(self) -> None:
        self.closed = threading.Event()

    def stream(self, messages, *, max_new_tokens=None, stop=None):
        try:
            yield from ("a", "b", "c", "d")
            yield Generation("abcd", "stop", None, 4)
        finally:
            self.closed.set()


def test_stop_ends_a_streamed_call_here_and_in_the_worker():
    backend = Streaming()
    vlm = GpuVLM(backend, "test-stop")
    stop = threading.Event()
    items = []
    for item in vlm.stream([Message("user", (TextPart("hi"),))], stop=stop):
        items.append(item)
        if item == "b":
            stop.set()
    assert items == ["a", "b", Generation("ab", "cancelled", None, 2)]
    assert backend.closed.is_set()
    assert zerogpu.requested_seconds("test-stop.stream", ([Message("user", (TextPart("hi"),))],), {}) == 13
    assert not hasattr(vlm, "generate_batch")  # a VLM that does not batch is not made to look as if it did


def test_a_failure_in_the_worker_comes_back_as_it_was():
    def fails():
        raise GpuQuotaError("the words")

    call = zerogpu.register("test-fails", fails, lambda: 1)
    with pytest.raises(GpuQuotaError, match="^the words$"):
        call()


class Shown(Streaming):
    """A VLM whose ``with_tools`` view answers with the names of the functions it was shown."""

    tools = None

    def with_tools(self, tools):
        view = Shown()
        view.tools = tools
        return view

    def stream(self, messages, *, max_new_tokens=None, stop=None):
        text = ",".join(t["function"]["name"] for t in self.tools) if self.tools else "none"
        yield text
        yield Generation(text, "stop", None, 1)


def test_a_schema_view_sends_the_schema_with_each_call_and_asks_for_its_tokens():
    tools = [{"type": "function", "function": {"name": "find", "description": "x" * 5994}}]  # 6065 characters of JSON
    vlm = GpuVLM(Shown(), "test-tools")
    view = vlm.with_tools(tools)
    hi = [Message("user", (TextPart("hi"),))]
    assert [list(v.stream(hi))[0] for v in (view, vlm)] == ["find", "none"]  # the plain wrapper sends none
    # 10 s to start, 1 + ceil(6065 / 3) = 2023 prompt tokens at 2000/s, 50 new tokens at 25/s: 13.0115 s -> 14 s
    assert zerogpu.requested_seconds("test-tools.stream", (hi,), {"tools": tools}) == 14
    assert zerogpu.requested_seconds("test-tools.stream", (hi,), {}) == 13


def test_a_backend_that_cannot_take_a_schema_is_refused_on_zerogpu_too():
    with pytest.raises(InputError, match="'streaming' cannot be given the tools as a function schema"):
        GpuVLM(Streaming(), "test-no-tools").with_tools([])
