"""The dataset benchmark's own code on the tiny models: every mode runs and the outputs are compared."""

from __future__ import annotations

import re

from sam3_agent.bench import batch as bench


def test_the_benchmark_runs_every_mode_and_finds_identical_outputs(capsys):
    # a long wait: each shared batch goes once both items ask (the default 50 ms, on a busy machine, may let a request
    # go alone while the other item is still in SAM 3, and then sharing saves nothing: a timing, not a defect)
    code = bench.main(["--vlm", "tiny", "--items", "2", "--concurrency", "2", "--decode-steps", "2", "--repeat", "1",
                       "--max-wait", "60"])
    out = capsys.readouterr().out
    assert code == 0
    rows = {m.group(1).strip(): m.groups()[1:] for m in re.finditer(
        r"^(one at a time|2 in flight|2 sharing)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)", out, re.M)}
    assert set(rows) == {"one at a time", "2 in flight", "2 sharing"}
    # two items, each: two segment calls, six verifications, one select -> the same requests in every mode
    assert len({r[3] for r in rows.values()}) == 1
    assert int(rows["2 sharing"][2]) < int(rows["one at a time"][2])  # sharing answers requests together
    assert "identical outputs: records yes, generated token ids yes" in out
