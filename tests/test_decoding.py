"""Per-model decoding defaults, their overrides (library, CLI, app), the seeded sampler, and the trace record."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from conftest import ASSETS, photo

from sam3_agent.agent.loop import Agent
from sam3_agent.cli.flags import backend_settings
from sam3_agent.cli.main import build_parser, main
from sam3_agent.engine.decoding import DecodingOverrides, DecodingSettings, apply_overrides, model_decoding
from sam3_agent.engine.sampling import GREEDY, Sampling, TokenChooser, request_seed
from sam3_agent.errors import InputError
from sam3_agent.messages import ImagePart, Message, TextPart
from sam3_agent.presets import TINY_MAX_NEW_TOKENS, BackendSettings, build_backends
from sam3_agent.tiny.qwen import real_generation_config
from sam3_agent.ui.settings import parse_settings
from sam3_agent.vlm.base import generate

INSTRUCT = Sampling(do_sample=True, temperature=0.7, top_p=0.8, top_k=20)
THINKING = Sampling(do_sample=True, temperature=1.0, top_p=0.95, top_k=20)


def config(**values) -> SimpleNamespace:
    fields = {"do_sample": None, "temperature": None, "top_p": None, "top_k": None}
    return SimpleNamespace(**{**fields, **values})


# ---------------------------------------------------------------- the defaults of each model


def test_qwen3_vl_instruct_samples_with_its_generation_config_and_verifies_greedily():
    defaults = model_decoding(config(**real_generation_config("qwen3_vl_instruct")), "qwen3_vl", thinking=False)
    assert defaults.main == DecodingSettings(2048, INSTRUCT)
    assert defaults.verify == DecodingSettings(512, GREEDY)
    assert (defaults.thinking, defaults.family, defaults.source) == (False, "qwen3_vl", "generation_config.json")


def test_qwen3_vl_thinking_samples_everywhere_with_longer_budgets():
    defaults = model_decoding(config(**real_generation_config("qwen3_vl_thinking")), "qwen3_vl", thinking=True)
    assert defaults.main == DecodingSettings(8192, THINKING)
    assert defaults.verify == DecodingSettings(4096, THINKING)  # greedy thinking loops: the verifier samples too


def test_qwen2_5_vl_keeps_its_single_candidate_settings():
    defaults = model_decoding(config(**real_generation_config("qwen2_5_vl")), "qwen2_5_vl", thinking=False)
    assert defaults.main.sampling == Sampling(do_sample=True, temperature=0.1, top_p=0.001, top_k=1)
    assert defaults.verify.sampling == GREEDY


def test_a_config_without_sampling_values_takes_the_model_cards_and_an_explicit_greedy_one_stays_greedy():
    assert model_decoding(config(), "qwen3_vl", thinking=True).main.sampling == THINKING
    assert model_decoding(config(), "qwen3_vl", thinking=True).source == "model card"
    assert model_decoding(config(do_sample=False), "qwen3_vl", thinking=False).main.sampling == GREEDY
    assert model_decoding(config(), "llava", thinking=False).main.sampling == GREEDY


# ---------------------------------------------------------------- overrides


@pytest.fixture
def instruct():
    return model_decoding(config(**real_generation_config("qwen3_vl_instruct")), "qwen3_vl", thinking=False)


def test_greedy_override_makes_every_call_greedy_and_keeps_the_seed(instruct):
    resolved = apply_overrides(instruct, DecodingOverrides(greedy=True, seed=5))
    assert resolved.main.sampling == resolved.verify.sampling == dataclasses.replace(GREEDY, seed=5)


def test_sampling_values_replace_the_models_and_imply_sampling(instruct):
    greedy_model = apply_overrides(instruct, DecodingOverrides(greedy=True))
    resolved = apply_overrides(greedy_model, DecodingOverrides(temperature=0.3, top_k=5))
    assert resolved.main.sampling == Sampling(do_sample=True, temperature=0.3, top_p=1.0, top_k=5)
    resolved = apply_overrides(instruct, DecodingOverrides(top_p=0.5, max_new_tokens=64, verify_max_new_tokens=32))
    assert resolved.main == DecodingSettings(64, dataclasses.replace(INSTRUCT, top_p=0.5))
    assert resolved.verify == DecodingSettings(32, GREEDY)


@pytest.mark.parametrize("overrides, message", [
    (DecodingOverrides(greedy=True, temperature=0.5), "greedy decoding takes no sampling values, got temperature"),
    (DecodingOverrides(temperature=0), "temperature must be > 0, got 0"),
    (DecodingOverrides(top_p=1.5), r"top_p must be in \(0, 1\], got 1.5"),
    (DecodingOverrides(top_k=-1), "top_k must be >= 0"),
    (DecodingOverrides(seed=-1), "seed must be in"),
    (DecodingOverrides(max_new_tokens=0), "max_new_tokens must be at least 1, got 0"),
])
def test_bad_overrides_say_what_is_wrong(instruct, overrides, message):
    with pytest.raises(ValueError, match=message):
        apply_overrides(instruct, overrides)


# ---------------------------------------------------------------- the sampler


def test_greedy_chooser_takes_the_most_likely_token():
    scores = torch.tensor([[0.1, 3.0, 2.9, -1.0]])
    assert TokenChooser(GREEDY, [1, 2, 3]).choose(scores) == 1


def test_a_request_draws_the_same_tokens_for_the_same_seed_and_prompt_and_never_outside_top_k():
    scores = torch.randn((1, 50), generator=torch.Generator().manual_seed(0))
    top = set(scores[0].topk(5).indices.tolist())
    sampling = Sampling(do_sample=True, temperature=2.0, top_k=5, seed=3)
    draws = [TokenChooser(sampling, [7, 8, 9]) for _ in range(2)]
    first = [draws[0].choose(scores) for _ in range(200)]
    assert first == [draws[1].choose(scores) for _ in range(200)]
    assert set(first) == top  # all five candidates come up, nothing else does
    other_prompt = TokenChooser(sampling, [7, 8, 10])
    assert [other_prompt.choose(scores) for _ in range(200)] != first
    assert request_seed(3, [7, 8, 9]) != request_seed(4, [7, 8, 9]) != request_seed(3, [7, 8, 10])


def test_top_p_keeps_the_smallest_set_reaching_p():
    scores = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    chooser = TokenChooser(Sampling(do_sample=True, top_p=0.75, seed=1), [1])
    assert {chooser.choose(scores) for _ in range(300)} == {0, 1}


# ---------------------------------------------------------------- backends, traces, flags


@pytest.fixture(scope="module")
def tiny_backends():
    return build_backends(BackendSettings(preset="tiny"))


def test_the_tiny_preset_records_its_decoding_in_the_trace_settings(tiny_backends):
    record = tiny_backends.settings["decoding"]
    assert record == {
        "main": {"max_new_tokens": TINY_MAX_NEW_TOKENS, "do_sample": True, "temperature": 0.7, "top_p": 0.8,
                 "top_k": 20, "seed": 0},
        "verify": {"max_new_tokens": TINY_MAX_NEW_TOKENS, "do_sample": False, "seed": 0},
        "thinking": False, "sampling_source": "generation_config.json",
    }
    agent = Agent(tiny_backends.vlm, tiny_backends.segmenter, verifier=tiny_backends.verifier,
                  settings=tiny_backends.settings)
    assert agent.settings()["decoding"] == record
    # the verifier is a view of the same loaded model: one lock, one prefix store
    assert tiny_backends.verifier.prefix_store is tiny_backends.vlm.prefix_store
    assert tiny_backends.verifier.decoding.sampling == dataclasses.replace(GREEDY, seed=0)


def test_a_seeded_run_repeats_and_another_seed_changes_it(tiny_backends):
    messages = [Message("system", (TextPart("You segment."),)),
                Message("user", (ImagePart(photo("coffee.jpg"), "raw"), TextPart("the cup")))]
    first = generate(tiny_backends.vlm, messages, max_new_tokens=10)
    assert generate(tiny_backends.vlm, messages, max_new_tokens=10) == first
    reseeded = build_backends(BackendSettings(preset="tiny", decoding=DecodingOverrides(seed=1)))
    assert reseeded.settings["decoding"]["main"]["seed"] == 1
    assert generate(reseeded.vlm, messages, max_new_tokens=10).text != first.text
    greedy = build_backends(BackendSettings(preset="tiny", decoding=DecodingOverrides(greedy=True)))
    assert greedy.settings["decoding"]["main"] == {"max_new_tokens": TINY_MAX_NEW_TOKENS, "do_sample": False,
                                                   "seed": 0}


def test_sampling_flags_with_a_script_are_refused(tmp_path):
    script = tmp_path / "script.json"
    script.write_text('["<tool>{}</tool>"]')
    with pytest.raises(InputError) as info:
        build_backends(BackendSettings(preset="tiny", script=str(script), decoding=DecodingOverrides(temperature=0.5)))
    assert str(info.value) == ("--decoding, --temperature, --top-p, --top-k and --seed apply to a model (--vlm-model "
                               "or --vlm-server): a script replays its text")


SERVER = {"preset": "tiny", "vlm_server": "http://127.0.0.1:9/v1", "vlm_server_model": "q"}


def test_a_server_is_sent_no_sampling_by_default_and_the_trace_says_so():
    backends = build_backends(BackendSettings(**SERVER))
    assert (backends.vlm.sampling, backends.verifier.sampling) == ({}, {})
    assert backends.settings["decoding"] == {
        "main": {"max_new_tokens": TINY_MAX_NEW_TOKENS, "sent": {}},
        "verify": {"max_new_tokens": TINY_MAX_NEW_TOKENS, "sent": {}},
        "sampling_source": "the server's own (no sampling field sent)"}


@pytest.mark.parametrize(("overrides", "main", "verify"), [
    (DecodingOverrides(greedy=True), {"temperature": 0}, {"temperature": 0}),
    (DecodingOverrides(temperature=0.6, top_p=0.9, top_k=7, seed=11), {"temperature": 0.6, "top_p": 0.9, "top_k": 7,
                                                                       "seed": 11}, {"seed": 11}),
    (DecodingOverrides(greedy=False), {}, {}),
])
def test_decoding_flags_with_a_server_are_sent_and_recorded(overrides, main, verify):
    settings = BackendSettings(**SERVER, max_new_tokens=300,
                               decoding=dataclasses.replace(overrides, verify_max_new_tokens=64))
    backends = build_backends(settings)
    assert (backends.vlm.sampling, backends.verifier.sampling) == (main, verify)
    assert (backends.vlm.max_new_tokens, backends.verifier.max_new_tokens) == (300, 64)
    assert backends.settings["decoding"]["main"] == {"max_new_tokens": 300, "sent": main}
    assert backends.settings["decoding"]["verify"] == {"max_new_tokens": 64, "sent": verify}


def test_cli_flags_become_decoding_overrides():
    args = build_parser().parse_args(["run", "--image", "x", "--query", "q", "--out", "o", "--decoding", "sample",
                                      "--temperature", "0.6", "--top-p", "0.9", "--top-k", "7", "--seed", "11",
                                      "--verify-max-new-tokens", "99"])
    assert backend_settings(args).decoding == DecodingOverrides(greedy=False, temperature=0.6, top_p=0.9, top_k=7, seed=11,
                                                         verify_max_new_tokens=99)


def test_cli_refuses_greedy_with_a_temperature_in_one_line(tmp_path, capsys):
    code = main(["run", "--preset", "tiny", "--image", str(ASSETS / "coffee.jpg"), "--query", "the cup",
                 "--out", str(tmp_path / "out"), "--decoding", "greedy", "--temperature", "0.5"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == ("error: greedy decoding takes no sampling values, got temperature: "
                                         "drop them or ask for sampling")


def test_app_flags_and_environment_variables_set_the_decoding():
    env = {"SAM3_AGENT_DECODING": "sample", "SAM3_AGENT_TEMPERATURE": "0.4", "SAM3_AGENT_TOP_P": "0.7",
           "SAM3_AGENT_TOP_K": "9", "SAM3_AGENT_SEED": "2", "SAM3_AGENT_VERIFY_MAX_NEW_TOKENS": "64"}
    settings, _ = parse_settings([], environ=env)
    assert settings.backend.decoding == DecodingOverrides(greedy=False, temperature=0.4, top_p=0.7, top_k=9, seed=2,
                                                          verify_max_new_tokens=64)
    settings, _ = parse_settings(["--decoding", "greedy", "--seed", "5"],
                                 environ={"SAM3_AGENT_DECODING": "sample", "SAM3_AGENT_SEED": "2"})
    assert (settings.backend.decoding.greedy, settings.backend.decoding.seed) == (True, 5)
    # greedy with the environment's sampling values contradicts itself: refused when parsed, before any model loads
    with pytest.raises(InputError, match="greedy decoding takes no sampling values, got temperature, top_k, top_p"):
        parse_settings(["--decoding", "greedy"], environ=env)
    with pytest.raises(InputError, match="SAM3_AGENT_SEED='x' is not a valid value"):
        parse_settings([], environ={"SAM3_AGENT_SEED": "x"})
