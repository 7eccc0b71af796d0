"""Settings of a run, of the models and of the command line: a wrong type or value is an InputError that names it,
before anything loads (never a TypeError later, never silently replaced by a default or ignored)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ASSETS

from sam3_agent.agent.config import AgentConfig
from sam3_agent.cli.main import main
from sam3_agent.errors import InputError
from sam3_agent.presets import BackendSettings, check_backend_settings

ROOT = Path(__file__).resolve().parent.parent  # the checkout


@pytest.mark.parametrize(("values", "message"), [
    ({"max_rounds": 2.5}, "max_rounds must be a whole number, got 2.5"),
    ({"max_rounds": "3"}, "max_rounds must be a whole number, got '3'"),
    ({"max_rounds": True}, "max_rounds must be a whole number, got True"),
    ({"max_rounds": 0}, "max_rounds must be between 1 and 100, got 0"),
    ({"score_threshold": "0.5"}, r"score_threshold must be a number in \[0, 1\], got '0.5'"),
    ({"score_threshold": float("nan")}, r"score_threshold must be a number in \[0, 1\], got nan"),
    ({"iom_threshold": 1.5}, r"iom_threshold must be a number in \[0, 1\], got 1.5"),
    ({"verify_batch_size": 0}, "verify_batch_size must be at least 1, got 0"),
    ({"max_new_tokens": 0}, "max_new_tokens must be at least 1, got 0"),
    ({"verify_max_new_tokens": 1.0}, "verify_max_new_tokens must be a whole number, got 1.0"),
])
def test_agent_config_refuses_wrong_types_and_values(values, message):
    with pytest.raises(InputError, match=message):
        AgentConfig(**values)


def test_agent_config_takes_numpy_numbers_from_sliders():
    config = AgentConfig(max_rounds=np.int64(5), score_threshold=np.float32(0.25))
    assert config.max_rounds == 5 and config.score_threshold == pytest.approx(0.25)


@pytest.mark.parametrize(("settings", "message"), [
    (BackendSettings(preset="tiny", sam3_model="facebook/sam3"), "--sam3-model would be ignored with --preset tiny"),
    (BackendSettings(preset="tiny", vlm_model="Qwen/Qwen3-VL-8B-Instruct"), "--vlm-model would be ignored"),
    (BackendSettings(max_new_tokens=0), "--max-new-tokens must be a whole number of at least 1, got 0"),
    (BackendSettings(max_new_tokens=-1), "--max-new-tokens must be a whole number of at least 1, got -1"),
    (BackendSettings(min_pixels=0), "--min-pixels must be a whole number of at least 1, got 0"),
    (BackendSettings(min_pixels=5000, max_pixels=4000), r"--min-pixels \(5000\) is above --max-pixels \(4000\)"),
    (BackendSettings(preset="huge"), "unknown preset 'huge'"),  # type: ignore[arg-type]
])
def test_backend_settings_that_would_fail_or_be_ignored_are_refused(settings, message):
    with pytest.raises(InputError, match=message):
        check_backend_settings(settings)


@pytest.mark.parametrize(("flags", "message"), [
    (["--max-new-tokens", "0"], "--max-new-tokens must be a whole number of at least 1, got 0"),
    (["--sam3-model", "facebook/sam3"], "--sam3-model would be ignored with --preset tiny"),
    (["--max-image-pixels", "0"], "--max-image-pixels must be at least 1, got 0"),
    (["--verify-batch-size", "0"], "verify_batch_size must be at least 1, got 0"),
])
def test_cli_flags_are_checked_before_any_model_loads(tmp_path, capsys, flags, message):
    code = main(["run", "--preset", "tiny", "--image", str(ASSETS / "coffee.jpg"), "--query", "x",
                 "--out", str(tmp_path / "out"), *flags])
    captured = capsys.readouterr()
    assert code == 2 and message in captured.err and captured.err.count("\n") == 1
    assert "Loading models" not in captured.out


def test_a_url_given_as_image_is_refused_with_advice(tmp_path, capsys):
    code = main(["run", "--preset", "tiny", "--image", "https://example.com/cat.jpg", "--query", "x",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "'https://example.com/cat.jpg' is a URL" in err and "download it first" in err


@pytest.mark.parametrize("command", [
    ["batch", "--input", str(ASSETS), "--query", "x"],
    ["eval", "--dataset", str(ROOT / "tests" / "data" / "datasets" / "gt.jsonl"), "--format", "jsonl"],
])
@pytest.mark.parametrize(("flags", "message"), [
    (["--max-new-tokens", "0"], "--max-new-tokens must be a whole number of at least 1, got 0"),
    (["--sam3-model", "facebook/sam3"], "--sam3-model would be ignored with --preset tiny"),
    (["--max-image-pixels", "0"], "--max-image-pixels must be at least 1, got 0"),
])
def test_batch_and_eval_check_the_same_flags_before_any_model_loads(tmp_path, capsys, command, flags, message):
    code = main([*command, "--preset", "tiny", "--out", str(tmp_path / "out"), "--no-progress", *flags])
    captured = capsys.readouterr()
    assert code == 2 and message in captured.err and captured.err.count("\n") == 1
    assert not (tmp_path / "out").exists()  # refused before the output folder was made, let alone a model loaded
