"""``python -m sam3_agent.smoke``: stops at once without CUDA or weights, with its own exit codes; on the tiny models
(``--preset tiny --allow-cpu``) every check runs and the report holds what each one measured."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from sam3_agent.smoke import __main__ as smoke
from sam3_agent.smoke.checks import _first_divergence, iou
from sam3_agent.smoke.report import CheckResult, SmokeReport, measured


def run_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = smoke.main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_without_cuda_it_stops_at_once_with_its_own_exit_code(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, err = run_main("--out", str(tmp_path / "report.json"))
    assert code == smoke.EXIT_NO_GPU == 5
    assert err.startswith("error: no CUDA GPU is visible to torch") and "--preset tiny --allow-cpu" in err
    assert out == "" and not (tmp_path / "report.json").exists()


def test_without_the_weights_in_the_cache_it_stops_at_once_naming_them(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    code, _, err = run_main("--vlm-model", "nobody/no-such-vlm", "--sam3-model", "nobody/no-such-sam3")
    assert code == smoke.EXIT_NO_WEIGHTS == 6
    assert err.startswith("error: not in the Hugging Face cache: nobody/no-such-vlm, nobody/no-such-sam3. ")
    assert "`hf download nobody/no-such-vlm`" in err


def test_the_cpu_is_allowed_only_for_the_tiny_models():
    code, _, err = run_main("--allow-cpu")
    assert code == smoke.EXIT_USAGE and "--allow-cpu is for the tiny preset only" in err


def test_a_failed_check_gives_exit_status_1_and_the_report_says_which(monkeypatch, tmp_path):
    report = SmokeReport({"device": "cpu", "torch": "x", "transformers": "y", "gradio": "z"},
                         [CheckResult("loading", None, "ok"), CheckResult("examples", False, "failed in 3")])
    monkeypatch.setattr(smoke, "run_checks", lambda args, stdout: report)
    code, out, _ = run_main("--preset", "tiny", "--allow-cpu", "--out", str(tmp_path / "r.json"))
    assert code == 1 and "1 of 2 checks without failure; failed: examples" in out
    assert json.loads((tmp_path / "r.json").read_text())["passed"] is False


def test_a_check_that_raises_is_reported_as_failed_with_the_message():
    result = CheckResult("x")
    with measured(result):
        raise RuntimeError("the model is gone")
    assert (result.passed, result.summary, result.peak_gpu_mib) == (False, "failed: the model is gone", None)


def test_the_first_divergent_token_and_iou():
    assert _first_divergence((1, 2, 3), (1, 2, 3)) is None
    assert _first_divergence((1, 2, 3), (1, 5, 3)) == 1
    assert _first_divergence((1, 2), (1, 2, 3)) == 2
    a = np.zeros((4, 4), bool)
    a[:2] = True
    b = np.zeros((4, 4), bool)
    b[1:3] = True
    assert iou(a, b) == 4 / 12 and iou(a, a) == 1.0


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke") / "report.json"
    code, stdout, _ = run_main("--preset", "tiny", "--allow-cpu", "--max-rounds", "1", "--examples", "2",
                               "--out", str(out))
    return code, stdout, json.loads(out.read_text())


def test_on_the_tiny_models_every_check_runs_and_none_fails(tiny_run):
    code, stdout, report = tiny_run
    assert code == 0 and report["passed"] is True
    assert [c["name"] for c in report["checks"]] == ["loading", "sam3_precision", "first_request", "decoding_paths",
                                                     "examples", "page_load"]
    assert report["environment"]["device"] == "cpu" and report["environment"]["torch"] == torch.__version__
    lines = stdout.splitlines()
    assert lines[-2] == "6 of 6 checks without failure" and lines[-1].startswith("JSON report: ")


def test_the_report_holds_each_checks_measurements(tiny_run):
    _, _, report = tiny_run
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["loading"]["details"]["sam3_dtype"] == "torch.float32"
    precision = checks["sam3_precision"]["details"]
    assert precision["masks_float32"] > 0 and 0.0 <= precision["top_mask_iou"] <= 1.0
    assert checks["first_request"]["details"]["finish_reason"] in ("stop", "length")
    decoding = checks["decoding_paths"]
    assert decoding["passed"] is True and decoding["details"]["first_divergent_token"] == [None] * 4
    paths = decoding["details"]["paths"]
    assert (paths["fast"], paths["cache"], paths["batched_rows"]) == (True, "attention", 3) and "note" not in paths
    assert 0 < paths["prefix_reuse"]["reused_tokens"] < paths["prefix_reuse"]["prompt_tokens"]
    assert decoding["summary"].startswith("fast path, attention cache (prefix reuse: ")
    assert [run["rounds"] for run in checks["examples"]["details"]["runs"]] == [1, 1]
    assert checks["page_load"]["passed"] is True and checks["page_load"]["details"]["tensors_copied"] == 0
    # random weights: what depends on the answers is not judged
    assert [checks[n]["passed"] for n in ("loading", "sam3_precision", "first_request", "examples")] == [None] * 4


# ---------------------------------------------------------------- the newer families and the paths they use

HYBRID_NOTE = ("hybrid cache (linear attention): prompt prefixes are reused only whole, as snapshots of the state "
               "after them")
GEMMA3_REASON = ("Gemma3ForConditionalGeneration has no Qwen-VL 3-D position index (get_rope_index): the cached "
                 "decoder cannot place its tokens")


def test_the_tiny_vlm_flag_chooses_the_family_and_needs_the_tiny_preset(monkeypatch, tmp_path):
    import sam3_agent.presets as presets

    asked = []

    def refuse(settings):
        asked.append(settings)
        raise RuntimeError("not loading in this test")

    monkeypatch.setattr(presets, "build_backends", refuse)
    code, _, _ = run_main("--preset", "tiny", "--allow-cpu", "--tiny-vlm", "gemma3", "--out", str(tmp_path / "r.json"))
    assert code == 1 and [s.tiny_vlm_kind for s in asked] == ["gemma3"]
    code, _, err = run_main("--tiny-vlm", "qwen3_5")
    assert code == smoke.EXIT_USAGE and "--tiny-vlm chooses a tiny model: use it with --preset tiny" in err


@pytest.fixture(scope="module")
def tiny_sam3():
    from sam3_agent.presets import tiny_model_paths
    from sam3_agent.sam.segmenter import Sam3Segmenter

    return Sam3Segmenter.from_pretrained(str(tiny_model_paths("qwen3_vl")[0]), device="cpu")


def decoding_check(kind: str, segmenter) -> CheckResult:
    """The smoke command's decoding check on the tiny VLM of ``kind`` (loaded as the tiny preset loads it)."""
    from sam3_agent.agent.prompts import load_prompts
    from sam3_agent.presets import tiny_model_paths
    from sam3_agent.smoke.checks import Models, check_decoding
    from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

    vlm = TransformersQwenVLM.from_pretrained(str(tiny_model_paths(kind)[1]), device="cpu")
    result = CheckResult("decoding_paths")
    check_decoding(result, Models(vlm, segmenter, None, {}, load_prompts(), judge=False), max_new_tokens=6)
    return result


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_5_moe"])
def test_a_hybrid_family_reports_prefix_reuse_and_batched_verification(kind, tiny_sam3):
    result = decoding_check(kind, tiny_sam3)
    paths = result.details["paths"]
    assert result.passed is True and result.details["first_divergent_token"] == [None] * 4
    assert (paths["fast"], paths["cache"], paths["batched_rows"], paths["note"]) == (
        True, "hybrid (linear + full attention)", 3, HYBRID_NOTE)
    reuse = paths["prefix_reuse"]
    assert 0 < reuse["reused_tokens"] < reuse["prompt_tokens"]  # the batch's shared prefix was computed once
    assert result.summary == (
        f"fast path, hybrid (linear + full attention) cache (prefix reuse: {reuse['reused_tokens']:,} of "
        f"{reuse['prompt_tokens']:,} prompt tokens reused; batched verification: 3 rows in one batch): "
        "token-identical to generate on the main request and the batch")


def test_a_family_the_engine_does_not_know_reports_plain_generate_and_why(tiny_sam3):
    result = decoding_check("gemma3", tiny_sam3)
    assert result.passed is None and result.details["paths"] == {"fast": False, "reason": GEMMA3_REASON}
    assert result.details["requests"] == 4  # the main request and three verifications, each answered
    assert result.summary == (f"plain generate ({GEMMA3_REASON}): the main request and 3 verifications answered one "
                              "at a time; no fast path to compare")
