"""``python -m sam3_agent.bench.families`` at a tiny size: one family on the fast path and one the engine keeps on
``generate``, measured in one run (the timings themselves are not asserted: they are the benchmark's to print)."""

from __future__ import annotations

import io
import re

from sam3_agent.bench.families import main

GEMMA3_REASON = ("Gemma3ForConditionalGeneration has no Qwen-VL 3-D position index (get_rope_index): the cached "
                 "decoder cannot place its tokens")
RATIO = r"(\d+\.\d\dx|inf|=)"


def test_the_command_prints_fast_against_plain_per_family_and_the_reason_of_a_plain_only_one():
    out = io.StringIO()
    code = main(["--kinds", "qwen3_vl", "gemma3", "--repeat", "1", "--decode-steps", "1"], out)
    lines = out.getvalue().splitlines()
    assert code == 0, out.getvalue()
    assert lines[0].startswith("SAM3 Agent per-family benchmark: fast path vs plain generate")
    rows = {line.split()[0]: line.split() for line in lines if line.split() and line.split()[0] in ("qwen3_vl", "gemma3")}
    fast = rows["qwen3_vl"]  # VLM s plain, fast, ratio; wall plain, fast, ratio; prefill plain, fast, ratio; same
    assert all(re.fullmatch(RATIO, fast[i]) for i in (3, 6, 9)) and fast[10:] == ["yes"]
    assert int(fast[7].replace(",", "")) > int(fast[8].replace(",", "")) > 0  # the fast path computed fewer tokens
    assert rows["gemma3"][2:4] == ["-", "-"] and rows["gemma3"][-3:] == ["plain", "only", "(1)"]
    assert lines[-1] == f"(1) gemma3: {GEMMA3_REASON}"
