"""At most two images in every main request, the reference agent's contract (issue 30): checked where the request is
built (``agent.context``), over random histories with dense sets (hypothesis), and pinned on every path a run takes
(scripted VLM, the local engine, a server, the native tool format, ZeroGPU, batch and eval) with 150 masks; the
opt-in tiles raise the cap to six and are recorded in the trace's settings."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, tool
from fake_server import FakeServer, chunk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from sam3_agent.agent import context
from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.context import OVER_IMAGE_CAP, build_context
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.prompts import load_prompts
from sam3_agent.imaging.enlarged import enlarged_layout
from sam3_agent.imaging.tiles import shows_tiles
from sam3_agent.limits import MAX_MAIN_IMAGES, MAX_MAIN_IMAGES_WITH_TILES
from sam3_agent.messages import ImagePart, Message, TextPart, ToolCall
from sam3_agent.vlm.scripted import ScriptedVLM

PROMPTS = load_prompts()
W = H = 512
# 150 masks on the 512 x 512 astronaut: a 15 x 10 grid of 30 x 44 px boxes, a dense set (its overlay is crowded)
GRID = [(((k % 15) * 34 + 2, (k // 15) * 50 + 2, (k % 15) * 34 + 32, (k // 15) * 50 + 46), 0.9) for k in range(150)]
SCRIPT = [tool("segment_phrase", text_prompt="bird"), tool("segment_phrase", text_prompt="small bird"),
          tool("select_masks_and_return", final_answer_masks=["1-150"])]
DETECTIONS = {"bird": GRID, "small bird": GRID}


def main_images(requests) -> list[int]:
    return [sum(len(m.images) for m in request) for request in requests]


def test_the_150_masks_are_a_dense_set_whose_overlay_is_drawn_at_the_budget():
    assert shows_tiles(W, H, 150)
    assert enlarged_layout(W, H).size == (1001, 1001)


# ---------------------------------------------------------------- the invariant over random histories

ROUND = st.tuples(
    st.sampled_from(["segment_phrase", "examine_each_mask", "select_masks_and_return", "mistake"]),
    st.integers(min_value=0, max_value=7),  # images in the reply: 0 (no mask), 1 (overlay), up to the overlay + 6
)


def history_of(rounds: list[tuple[str, int]]) -> tuple[list[Message], list[str] | None]:
    """A main conversation from ``rounds`` (the tool called, the images its reply holds), and the names of the images
    of the reply showing the current masks (``None``: no current overlay)."""
    messages = [Message("system", (TextPart("SYSTEM"),)),
                Message("user", (ImagePart(Image.new("RGB", (4, 4)), "raw"), TextPart("query")))]
    current: list[str] | None = None
    for k, (name, count) in enumerate(rounds, start=1):
        mistake = name == "mistake"
        call = None if mistake else ToolCall(name, {}, name)
        messages.append(Message("assistant", (TextPart(f"round {k}"),), call, starts_masks=name == "segment_phrase",
                                mistake=mistake))
        images = tuple(ImagePart(Image.new("RGB", (4, 4), (k, i, 0)), f"r{k}_{i}") for i in range(count))
        messages.append(Message("user", (TextPart(f"reply {k}"), *images)))
        if name in ("segment_phrase", "examine_each_mask"):
            current = [p.name for p in images] or None
    return messages, current


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(ROUND, max_size=12), cap=st.sampled_from([MAX_MAIN_IMAGES, MAX_MAIN_IMAGES_WITH_TILES]))
def test_no_history_sends_more_than_the_cap_and_the_check_never_has_to_repair(rounds, cap, caplog):
    caplog.clear()
    messages, current = history_of(rounds)
    with caplog.at_level(logging.ERROR, logger="sam3_agent.agent.context"):
        sent, record = build_context(messages, lambda key, **_: f"[{key}]", cap)
    shown = [p.name for m in sent for p in m.images]
    assert len(shown) == record.image_count <= cap
    assert shown == ["raw"] + (current or [])[: cap - 1]  # the photo, then the current overlay (and its tiles)
    assert not caplog.records  # built within the cap: the invariant's repair never ran
    assert OVER_IMAGE_CAP not in dict(record.reasons or ())


def test_a_code_path_that_would_break_the_cap_is_caught_and_repaired_never_sent(monkeypatch, caplog):
    """A planted bug: the policy shows every image. The check where the request is built logs it as a bug and sends
    the photo and the newest image only: a user's run neither breaks the cap nor stops."""
    monkeypatch.setattr(context, "_images_shown", lambda messages, kept, cap: {
        (i, k) for i in kept for k, part in enumerate(messages[i].parts) if isinstance(part, ImagePart)})
    messages, _ = history_of([("segment_phrase", 5), ("examine_each_mask", 3)])
    with caplog.at_level(logging.ERROR, logger="sam3_agent.agent.context"):
        sent, record = build_context(messages, lambda key, **_: f"[{key}]")
    assert [p.name for m in sent for p in m.images] == ["raw", "r2_2"]
    assert record.image_count == 2 and dict(record.reasons)[3] == OVER_IMAGE_CAP
    assert "context policy bug: a main request held 9 images, more than its cap of 2" in caplog.text


# ---------------------------------------------------------------- every path, a scripted run over 150 masks


def _run(vlm, config=None, verifier=None):
    agent = Agent(vlm, KnownSegmenter(DETECTIONS), config or AgentConfig(), verifier=verifier or ScriptedVLM([]))
    agent_run = agent.start(photo("astronaut.jpg"), "every bird")
    list(agent_run)
    return agent_run.trace


def test_a_scripted_run_over_150_masks_sends_two_images_and_records_the_setting():
    vlm = ScriptedVLM(list(SCRIPT))
    trace = _run(vlm)
    assert trace.status == "done" and len(trace.final_masks) == 150
    assert main_images(vlm.requests) == [1, 2, 2]
    assert [r.context.image_count for r in trace.rounds] == [1, 2, 2]
    overlay = trace.messages[trace.rounds[0].reply_index].images
    assert [(p.name, p.view.enlarged, p.image.size) for p in overlay] == [("round1_overlay", True, (1001, 1001))]
    assert trace.settings["dense_tiles"] is False


def test_with_the_opt_in_tiles_the_same_run_sends_six_and_records_it():
    vlm = ScriptedVLM(list(SCRIPT))
    trace = _run(vlm, AgentConfig(dense_tiles=True))
    assert main_images(vlm.requests) == [1, 6, 6]
    assert trace.settings["dense_tiles"] is True


def test_the_native_tool_format_sends_two_images():
    from test_tool_format import native

    vlm = ScriptedVLM([native("segment_phrase", text_prompt="bird"), native("segment_phrase", text_prompt="small bird"),
                       native("select_masks_and_return", final_answer_masks=["1-150"])])
    trace = _run(vlm, AgentConfig(tool_format="native"))
    assert trace.status == "done" and main_images(vlm.requests) == [1, 2, 2]


def test_zerogpu_sends_two_images():
    from sam3_agent.models.gpu_calls import GpuVLM

    inner = ScriptedVLM(list(SCRIPT))
    trace = _run(GpuVLM(inner, "test-image-cap"))
    assert trace.status == "done" and main_images(inner.requests) == [1, 2, 2]


def test_a_server_allowing_the_recipes_three_images_runs_a_dense_set_with_verification():
    """vLLM with --limit-mm-per-prompt '{"image": 3}' (docs/serving.md): main requests hold two, verifications three."""
    from sam3_agent.vlm.openai_server import OpenAIServerVLM
    from sam3_agent.vlm.server_retry import RetryPolicy

    script = [SCRIPT[0], tool("examine_each_mask", masks=[1, 2]), tool("select_masks_and_return", final_answer_masks=[1])]
    server = FakeServer()
    try:
        def handle(handler, body):
            images = sum(1 for m in body["messages"] if isinstance(m["content"], list)
                         for item in m["content"] if item["type"] == "image_url")
            if images > 3:
                error = {"object": "error", "message": "At most 3 image(s) may be provided in one prompt.",
                         "type": "BadRequestError", "code": 400}
                return server.json_body(error, 400)(handler, body)
            if body["messages"][0]["content"] == PROMPTS.verify_system:
                return server.events([chunk("<think>x</think><verdict>Accept</verdict>", "stop")])(handler, body)
            calls = sum(1 for m in body["messages"] if m["role"] == "assistant")
            return server.events([chunk(script[calls], "stop")])(handler, body)

        server.answer(handle)
        vlm = OpenAIServerVLM(server.url, "qwen", retry=RetryPolicy(backoff=0.01))
        trace = _run(vlm, AgentConfig(verify_batch_size=1), verifier=vlm)
        counts = [sum(1 for m in b["messages"] if isinstance(m["content"], list)
                      for item in m["content"] if item["type"] == "image_url") for b in server.bodies]
    finally:
        server.close()
    assert trace.status == "done", trace.error
    main = [n for n, b in zip(counts, server.bodies) if b["messages"][0]["content"] != PROMPTS.verify_system]
    assert main == [1, 2, 2] and max(counts) == 3


def test_the_local_engine_is_sent_two_images(tiny_vlm):
    """The tiny Qwen3-VL runs every request for real (its processor takes the enlarged overlay); its text is scripted."""
    from sam3_agent.bench.doubles import ScriptedOverModel

    sent: list[list[Message]] = []

    def respond(messages):
        sent.append(list(messages))
        return SCRIPT[len(sent) - 1]

    trace = _run(ScriptedOverModel(tiny_vlm, respond, 1, "tiny-qwen3-vl"))
    assert trace.status == "done" and main_images(sent) == [1, 2, 2]
    assert trace.rounds[1].prompt_tokens is not None


@pytest.fixture(scope="module")
def tiny_vlm():
    from sam3_agent.presets import BackendSettings, build_backends

    return build_backends(BackendSettings(preset="tiny", device="cpu", max_new_tokens=4)).vlm


@pytest.mark.parametrize("command", ["batch", "eval"])
def test_batch_and_eval_send_two_images_by_default_and_six_with_the_flag(command, tmp_path):
    """The config the ``batch`` and ``eval`` flags give (``cli.flags.agent_config``), through the batch runner."""
    import json

    from sam3_agent.cli.flags import agent_config
    from sam3_agent.cli.parser import build_parser
    from sam3_agent.datasets.batch.agents import BatchAgents
    from sam3_agent.datasets.batch.items import read_items
    from sam3_agent.datasets.batch.layout import BatchLayout
    from sam3_agent.datasets.batch.runner import run_batch
    from sam3_agent.package_files import ASSETS_DIR
    from sam3_agent.presets import Backends

    items_file = tmp_path / "items.jsonl"
    items_file.write_text(json.dumps({"id": "birds", "image": str(ASSETS_DIR / "astronaut.jpg"), "query": "birds"}))
    given = {"batch": ["batch", "--input", str(items_file), "--out", str(tmp_path / "out")],
             "eval": ["eval", "--dataset", str(items_file), "--format", "jsonl", "--out", str(tmp_path / "out")]}[command]
    counts = {}
    for flag in ([], ["--dense-tiles"]):
        args = build_parser().parse_args([*given, "--preset", "tiny", *flag])
        main = ScriptedVLM(list(SCRIPT))  # one item: its agent's VLM is this one, which records every request
        backends = Backends(main, ScriptedVLM([]), KnownSegmenter(DETECTIONS), {"vlm": "scripted"})
        items = read_items(items_file)
        layout = BatchLayout(tmp_path / f"out{len(flag)}", items)
        layout.prepare()
        run_batch(items, layout, BatchAgents(backends, agent_config(args)))
        counts[bool(flag)] = main_images(main.requests)
    assert counts == {False: [1, 2, 2], True: [1, 6, 6]}


def test_every_kept_image_of_a_long_dense_run_is_within_the_cap():
    """Many rounds of dense sets, examinations and mistakes: every request of the run at most two images."""
    script = [SCRIPT[0], "no call here", tool("examine_each_mask", masks=["1-3"]), SCRIPT[1], "again nothing",
              tool("examine_each_mask", masks=[1]), tool("select_masks_and_return", final_answer_masks=[1])]
    vlm = ScriptedVLM(script)
    verifier = ScriptedVLM(["<verdict>Accept</verdict>"] * 4)
    trace = _run(vlm, verifier=verifier)
    assert trace.status == "done"
    assert max(main_images(vlm.requests)) == 2 and np.all(np.array([r.context.image_count for r in trace.rounds]) <= 2)


# ---------------------------------------------------------------- what the cap costs and keeps (the benchmark's table)


def test_the_benchmark_prints_a_dense_requests_tokens_and_legibility_both_ways(capsys):
    from sam3_agent.bench.labels import main, measure_request

    main(["--photos", "rocket.jpg", "--counts", "200", "--request-counts", "20", "100", "200"])
    table = capsys.readouterr().out.split("main request of the round")[1].splitlines()
    rows = [line.split() for line in table if line.startswith("rocket.jpg")]
    # photo 260 tokens + overlay: at the photo's size 260, at the budget (1226 x 818) 950; the tiles 4 x 260 more
    assert [r[1:8] for r in rows] == [["20", "no", "|", "2", "520", "100.0%", "21.0"],
                                      ["100", "yes", "|", "2", "1210", "100.0%", "32.0"],
                                      ["200", "yes", "|", "2", "1210", "100.0%", "21.0"]]
    assert [r[9:11] for r in rows] == [["2", "520"], ["6", "1560"], ["6", "1560"]]
    dense = measure_request("rocket.jpg", 200)
    assert dense["default_digits_px"] > dense["tiles_tiles_digits_px"] > dense["tiles_digits_px"]  # 21 > 19 > 12 px
    assert "worst legible share, default vs --dense-tiles" in table[-1]


# ---------------------------------------------------------------- the opt-in, where a user sets it


def test_the_opt_in_is_a_command_line_flag_an_app_setting_and_a_config_field():
    from sam3_agent.cli.flags import agent_config
    from sam3_agent.cli.parser import build_parser
    from sam3_agent.errors import InputError
    from sam3_agent.ui.settings import parse_settings

    run = ["run", "--image", "a.jpg", "--query", "q", "--out", "o"]
    assert agent_config(build_parser().parse_args(run)).dense_tiles is False
    assert agent_config(build_parser().parse_args([*run, "--dense-tiles"])).dense_tiles is True
    assert parse_settings([], environ={})[0].dense_tiles is False
    assert parse_settings(["--dense-tiles", "on"], environ={})[0].dense_tiles is True
    assert parse_settings([], environ={"SAM3_AGENT_DENSE_TILES": "on"})[0].dense_tiles is True
    with pytest.raises(InputError, match="SAM3_AGENT_DENSE_TILES='yes' must be one of"):
        parse_settings([], environ={"SAM3_AGENT_DENSE_TILES": "yes"})
    with pytest.raises(InputError, match="dense_tiles must be true or false"):
        AgentConfig(dense_tiles="on")


def test_the_apps_runs_get_the_setting():
    from sam3_agent.presets import Backends
    from sam3_agent.ui.run.runner import AgentFactory
    from sam3_agent.ui.settings import AppSettings

    backends = Backends(ScriptedVLM([]), ScriptedVLM([]), KnownSegmenter({}), {})
    for on in (False, True):
        agent = AgentFactory(AppSettings(dense_tiles=on), backends).new_agent(30, 0.5)
        assert agent.config.dense_tiles is on and agent.settings()["dense_tiles"] is on
