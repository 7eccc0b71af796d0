"""App launch settings: flags, environment variables and their precedence."""

from __future__ import annotations

import pytest

from sam3_agent.errors import InputError
from sam3_agent.presets import BackendSettings
from sam3_agent.ui.settings import AppSettings, parse_settings


def test_defaults_are_the_real_models_on_localhost_7860():
    settings, verbose = parse_settings([], environ={})
    assert settings == AppSettings(BackendSettings(preset="real"), max_rounds=30, score_threshold=0.5,
                                   script_piece_delay=0.0, concurrency=1, host="127.0.0.1", port=7860)
    assert verbose is False


def test_environment_variables_set_every_option():
    env = {
        "SAM3_AGENT_PRESET": "real", "SAM3_AGENT_VLM_MODEL": "Qwen/Qwen2.5-VL-7B-Instruct",
        "SAM3_AGENT_SAM3_MODEL": "/models/sam3", "SAM3_AGENT_VLM_SERVER": "http://10.0.0.2:8000/v1",
        "SAM3_AGENT_VLM_SERVER_MODEL": "qwen", "SAM3_AGENT_MAX_ROUNDS": "12", "SAM3_AGENT_SCORE_THRESHOLD": "0.4",
        "SAM3_AGENT_MIN_PIXELS": "1000", "SAM3_AGENT_MAX_PIXELS": "2000000", "SAM3_AGENT_MAX_NEW_TOKENS": "256",
        "SAM3_AGENT_DEVICE": "cpu", "SAM3_AGENT_TINY_VLM": "qwen2_5_vl", "SAM3_AGENT_CONCURRENCY": "2",
        "SAM3_AGENT_SCRIPT_PIECE_DELAY": "0.01", "GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "7000",
        "SAM3_AGENT_PREFIX_CACHE": "off", "SAM3_AGENT_MAX_IMAGE_PIXELS": "4000000",
        "SAM3_AGENT_VLM_SERVER_CONNECT_TIMEOUT": "3",
        "SAM3_AGENT_VLM_SERVER_READ_TIMEOUT": "45.5", "SAM3_AGENT_VLM_SERVER_DEADLINE": "300",
    }
    settings, _ = parse_settings([], environ=env)
    assert settings == AppSettings(
        BackendSettings(preset="real", vlm_model="Qwen/Qwen2.5-VL-7B-Instruct", vlm_server="http://10.0.0.2:8000/v1",
                        vlm_server_model="qwen", sam3_model="/models/sam3", device="cpu", min_pixels=1000,
                        max_pixels=2000000, max_new_tokens=256, tiny_vlm_kind="qwen2_5_vl", prefix_cache=False,
                        vlm_server_connect_timeout=3.0, vlm_server_read_timeout=45.5, vlm_server_deadline=300.0),
        max_rounds=12, score_threshold=0.4, script_piece_delay=0.01, concurrency=2, max_image_pixels=4_000_000,
        host="0.0.0.0", port=7000,
    )


def test_flags_win_over_environment_variables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the scripts are read while the settings are checked
    for name in ("env.json", "flag.json"):
        (tmp_path / name).write_text('["<tool>{}</tool>"]')
    env = {"SAM3_AGENT_PRESET": "real", "SAM3_AGENT_MAX_ROUNDS": "12", "SAM3_AGENT_SCRIPT": "env.json",
           "GRADIO_SERVER_PORT": "7000", "SAM3_AGENT_VLM_SERVER_DEADLINE": "300"}
    settings, verbose = parse_settings(["--preset", "tiny", "--max-rounds", "5", "--script", "flag.json",
                                        "--port", "7001", "--vlm-server-deadline", "90", "-v"], environ=env)
    assert (settings.backend.preset, settings.max_rounds, settings.backend.script, settings.port) == (
        "tiny", 5, "flag.json", 7001)
    assert settings.backend.vlm_server_deadline == 90.0
    assert verbose is True


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SAM3_AGENT_MAX_ROUNDS": "many"}, "SAM3_AGENT_MAX_ROUNDS='many' is not a valid value"),
        ({"SAM3_AGENT_PRESET": "huge"}, r"SAM3_AGENT_PRESET='huge' must be one of \['real', 'tiny'\]"),
        ({"SAM3_AGENT_MAX_ROUNDS": "0"}, "round budget must be between 1 and 100, got 0"),
        ({"SAM3_AGENT_SCORE_THRESHOLD": "1.5"}, r"score threshold must be in \[0, 1\], got 1.5"),
        ({"GRADIO_SERVER_PORT": "70000"}, "port must be between 1 and 65535, got 70000"),
        ({"SAM3_AGENT_CONCURRENCY": "0"}, "concurrency must be at least 1, got 0"),
        ({"SAM3_AGENT_MAX_NEW_TOKENS": "0"}, "--max-new-tokens must be a whole number of at least 1, got 0"),
        ({"SAM3_AGENT_PRESET": "tiny", "SAM3_AGENT_SAM3_MODEL": "facebook/sam3"},
         "--sam3-model would be ignored with --preset tiny"),
        ({"SAM3_AGENT_MAX_IMAGE_PIXELS": "0"}, "image pixel limit must be at least 1, got 0"),
    ],
)
def test_bad_values_raise_input_errors_naming_them(env, message):
    with pytest.raises(InputError, match=message):
        parse_settings([], environ=env)


def test_app_main_reports_a_bad_setting_in_one_line(capsys, monkeypatch):
    import app

    monkeypatch.setenv("SAM3_AGENT_MAX_ROUNDS", "-3")
    assert app.main([]) == 2
    assert capsys.readouterr().err == "error: the round budget must be between 1 and 100, got -3\n"


def test_prefix_cache_flag_wins_over_the_environment_and_rejects_other_values():
    assert parse_settings([], environ={})[0].backend.prefix_cache is True
    assert parse_settings(["--prefix-cache", "on"], environ={"SAM3_AGENT_PREFIX_CACHE": "off"})[0].backend.prefix_cache
    with pytest.raises(InputError, match="SAM3_AGENT_PREFIX_CACHE='no' must be one of \\['off', 'on'\\]"):
        parse_settings([], environ={"SAM3_AGENT_PREFIX_CACHE": "no"})


def test_review_root_from_the_flag_or_the_environment_must_be_a_folder(tmp_path):
    flag, env = tmp_path / "flag", tmp_path / "env"
    flag.mkdir()
    env.mkdir()
    assert parse_settings([], environ={})[0].review_root is None
    assert parse_settings([], environ={"SAM3_AGENT_REVIEW_ROOT": str(env)})[0].review_root == env
    chosen = parse_settings(["--review-root", str(flag)], environ={"SAM3_AGENT_REVIEW_ROOT": str(env)})[0]
    assert chosen.review_root == flag
    with pytest.raises(InputError, match=r"review folder .*missing.* is not a folder"):
        parse_settings(["--review-root", str(tmp_path / "missing")], environ={})
