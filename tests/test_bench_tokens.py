"""The token benchmark (``python -m sam3_agent.bench.tokens``): requests counted in Qwen3-VL tokens with ideal prefix
reuse, the reference's requests read back with its prompts' token counts, and the command run at a small size."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest
from PIL import Image

from sam3_agent.bench import tokens
from sam3_agent.bench.token_count import RequestTokens, TokenCounter, common_prefix, computed_with_ideal_reuse
from sam3_agent.messages import ImagePart, Message, TextPart


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def request(*keys: int) -> RequestTokens:
    return RequestTokens(np.asarray(keys, dtype=np.int64), 0)


def test_each_request_computes_what_follows_its_longest_prefix_shared_with_an_earlier_one():
    requests = [request(1, 2, 3, 4), request(1, 2, 3, 5, 6), request(1, 2, 9), request(7), request(1, 2, 3, 5, 6, 8)]
    assert computed_with_ideal_reuse(requests) == [4, 2, 1, 1, 1]
    assert common_prefix(np.array([1, 2]), np.array([1, 2, 3])) == 2 and common_prefix(np.array([]), np.array([1])) == 0


def test_images_count_their_processor_tokens_and_match_only_the_same_pixels(counter):
    assert counter.limits.min_pixels == 65_536 and counter.limits.max_pixels == 1_003_520
    assert counter.image_tokens(640, 427) == 20 * 13 and counter.image_tokens(1008, 1008) == 31 * 31
    assert counter.image_tokens(100, 100) == 8 * 8  # raised to the processor's 65,536 px minimum
    red, blue = Image.new("RGB", (640, 427), (200, 0, 0)), Image.new("RGB", (640, 427), (0, 0, 200))
    system = Message("system", (TextPart("Check the mask."),))
    first = counter.request([system, Message("user", (ImagePart(red, "a"), TextPart("the cup")))])
    same = counter.request([system, Message("user", (ImagePart(red.copy(), "b"), TextPart("the cup")))])
    other = counter.request([system, Message("user", (ImagePart(blue, "a"), TextPart("the cup")))])
    assert first.image_tokens == 260 and np.array_equal(first.keys, same.keys)
    start = int(np.flatnonzero(first.keys < 0)[0])  # the first image token
    assert computed_with_ideal_reuse([first, same, other]) == [len(first), 0, len(other) - start]


def test_the_reference_requests_are_read_with_its_system_prompts_token_counts(counter, tmp_path):
    Image.new("RGB", (64, 48), (10, 20, 30)).save(tmp_path / "photo.png")
    main_text, check_text = "placeholder system prompt", "placeholder verification system prompt"
    document = {"main_prompt_placeholder": main_text, "check_prompt_placeholder": check_text, "requests": [
        [{"role": "system", "content": main_text},
         {"role": "user", "content": [{"type": "image", "image": "photo.png"}, {"type": "text", "text": "q"}]}],
        [{"role": "system", "content": check_text},
         {"role": "user", "content": [{"type": "text", "text": "The raw input image: "},
                                      {"type": "image", "image": "photo.png"}]}],
    ]}
    (tmp_path / "requests.json").write_text(json.dumps(document))
    requests, is_verify, corrections = tokens.reference_requests(tmp_path, None, counter)
    assert is_verify == [False, True]
    assert corrections == [14_002 - len(counter._ids(main_text)), 1_170 - len(counter._ids(check_text))]
    assert [p.image.size for p in requests[0][1].images] == [(64, 48)]
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "system_prompt.txt").write_text("  You are the main model.\n")
    (prompts / "system_prompt_iterative_checking.txt").write_text("You check.")
    requests, _, corrections = tokens.reference_requests(tmp_path, prompts, counter)
    assert corrections == [0, 0]
    assert [r[0].text for r in requests] == ["You are the main model.", "You check."]


def test_the_command_runs_at_a_small_size_and_prints_ours_and_the_round_mask_by_mask_and_in_groups():
    out = io.StringIO()
    with redirect_stdout(out):
        assert tokens.main(["--cases", "320x240/3", "--round", "320x240/10"]) == 0
    lines = out.getvalue().splitlines()
    # 4 main requests and 3 verifications; no reference figure for this size (none measured, none cited). The system
    # prompt no longer speaks of tiles (issue 30): 54 tokens fewer, sent 4 times, computed once
    assert lines[3].split() == ["320x240/3", "7", "12,069", "4,540", "2,071", "|", "0", "0", "|", "nan%"]
    assert [line.split()[-4:] for line in lines[-2:]] == [["10", "2", "12,821", "5,762"], ["2", "1", "1,819", "1,053"]]
    assert lines[-2].startswith("mask by mask") and lines[-1].startswith("in groups")


def test_without_the_reference_its_measured_figures_are_printed_as_cited(monkeypatch):
    monkeypatch.setattr(tokens, "run_ours", lambda case, examine=None, limits=None: ([], []))
    monkeypatch.setattr(tokens, "count", lambda *args: tokens.Counted(10, 20_000, 9_000))
    out = io.StringIO()
    with redirect_stdout(out):
        tokens.main(["--cases", "640x427/20", "--round", "none"])
    text = out.getvalue()
    assert "reference CITED" in text and "|       24    95,877 |         9.4%" in text
    assert text.endswith("goal: ours computes <= 15% of the reference's tokens at 1 sizes: yes (highest 9.4%)\n")
