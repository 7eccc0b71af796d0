"""docs/reference.md, the deviations from the reference agent (issue 30): every deviation of
``sam3_agent.deviations`` has its row, every figure ``bench.deviation_figures`` prints is stated there, which
deviations a run had is derived from its trace, and the eval report counts them."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout
from pathlib import Path

from conftest import KnownSegmenter, photo, tool

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.deviations import DEVIATIONS, KEYS, deviations_in, summary_lines
from sam3_agent.vlm.scripted import ScriptedVLM

DOC = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text(encoding="utf-8")
ALWAYS = [d.key for d in DEVIATIONS if d.always]


def test_every_deviation_has_its_row_and_every_row_a_deviation():
    rows = re.findall(r"^\| [^|]*\(`([a-z_]+)`", DOC, re.MULTILINE)
    assert rows == list(KEYS)
    for d in DEVIATIONS:
        if d.switch:
            assert d.switch in DOC.replace("`", ""), d.key


def test_every_figure_the_command_prints_is_stated_on_the_page():
    from sam3_agent.bench.deviation_figures import figures, main

    out = io.StringIO()
    with redirect_stdout(out):
        assert main([]) == 0
    measured = figures()
    assert len(out.getvalue().splitlines()) == len(measured)
    for name, value in measured.items():
        if value >= 10:  # small counts (2 images, 3 images) are words in the prose
            assert f"{value:,}" in DOC, name
    assert measured["main_images"] == measured["reference_main_images"] == 2
    assert measured["dense_request_image_tokens"] - measured["photo_size_request_image_tokens"] == 690
    assert f"+{690} image tokens" in DOC


def run(main, config=None, verify=(), detections=None):
    agent = Agent(ScriptedVLM(main), KnownSegmenter(detections or {"child": [((20, 20, 120, 220), 0.9),
                                                                              ((300, 300, 400, 400), 0.8)]}),
                  config or AgentConfig(), verifier=ScriptedVLM(list(verify)))
    return agent.run(photo("astronaut.jpg"), "the child")


def test_a_default_run_has_only_the_always_on_deviations():
    trace = run([tool("segment_phrase", text_prompt="child"), tool("select_masks_and_return", final_answer_masks=[1])])
    assert deviations_in(trace) == ALWAYS


def test_the_reference_round_budget_and_the_switches_are_read_from_the_settings():
    script = [tool("report_no_mask")]
    assert "round_budget" not in deviations_in(run(script, AgentConfig(max_rounds=100)))
    on = deviations_in(run(script, AgentConfig(dense_tiles=True)))
    assert "dense_tiles" in on and "native_tool_format" not in on


def test_what_the_model_used_is_read_from_its_calls_and_verdicts():
    script = [tool("segment_phrase", text_prompt="child"), tool("examine_each_mask", masks=[1], in_groups=True),
              tool("select_masks_and_return", final_answer_masks=["1-2"])]
    unclear = "<think>x</think>Mask 1: <verdict>Probably accept</verdict>"
    on = deviations_in(run(script, verify=[unclear, unclear]))
    assert [k for k in on if k not in ALWAYS] == ["kept_unconfirmed", "examine_named_masks", "examine_in_groups",
                                                 "selection_ranges"]
    accepted = deviations_in(run(script, verify=["<think>x</think>Mask 1: <verdict>Accept</verdict>"]))
    assert "kept_unconfirmed" not in accepted and "examine_in_groups" in accepted


def test_a_dense_run_draws_its_overlay_enlarged():
    grid = [(((k % 15) * 34 + 2, (k // 15) * 50 + 2, (k % 15) * 34 + 32, (k // 15) * 50 + 46), 0.9) for k in range(150)]
    trace = run([tool("segment_phrase", text_prompt="bird"), tool("report_no_mask")], detections={"bird": grid})
    assert "dense_overlay_enlarged" in deviations_in(trace)


def test_the_summary_counts_runs_and_names_the_switch():
    lines = summary_lines([["round_budget", "selection_ranges"], ["round_budget"], None])
    assert lines == ["mask ranges in a selection (selection_ranges): 1 of 2 run(s)",
                     "round budget 30 (round_budget): 2 of 2 run(s); the reference's behaviour: --max-rounds 100",
                     "1 run(s) recorded before the deviations were: not counted"]


def test_the_eval_report_names_the_deviations_of_its_runs(tmp_path):
    from dataset_fixtures import ASSETS, FIXTURES
    from test_datasets_eval import REASONSEG_ANSWERS, run_eval

    from sam3_agent.datasets.formats.reasonseg import read_reasonseg
    from sam3_agent.datasets.scoring.report import write_report

    samples = read_reasonseg(FIXTURES / "reasonseg", images=ASSETS)
    layout, evaluation = run_eval(samples, REASONSEG_ANSWERS, tmp_path / "out")
    assert evaluation.deviations[0].startswith("this project's own system prompts (own_prompts): ")
    page = write_report(evaluation, samples, layout, tmp_path / "eval").read_text()
    assert "<h2>Deviations from the reference agent</h2>" in page
    assert "round budget 30 (round_budget)" in page
