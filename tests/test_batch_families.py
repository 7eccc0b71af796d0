"""``batch`` with the newer tiny families (Qwen3.5, Qwen3.5-MoE with hybrid caches; Gemma 3 on the plain path): two
items in flight share the model's batches, and with random weights every item ends on its round budget, recorded,
never crashed."""

from __future__ import annotations

import json

import pytest
from dataset_fixtures import ASSETS

from sam3_agent.cli.main import main

PATHS = {"qwen3_5": "cached decoder", "qwen3_5_moe": "cached decoder", "gemma3": "generate"}


@pytest.mark.parametrize("kind", list(PATHS))
def test_a_two_item_batch_finishes_every_item_on_its_budget(kind, tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"image": str(ASSETS / photo), "query": query}) + "\n"
                             for photo, query in (("coffee.jpg", "the cup"), ("chelsea.jpg", "the cat's ear"))))
    out = tmp_path / "out"
    code = main(["batch", "--preset", "tiny", "--tiny-vlm", kind, "--input", str(items), "--out", str(out),
                 "--no-progress", "--concurrency", "2", "--max-rounds", "1", "--max-new-tokens", "8"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert "Batch: 2 item(s): max_rounds 2; ran 2, skipped 0 already finished" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["statuses"] == {"max_rounds": 2} and summary["rounds"]["total"] == 2
    for record in sorted(out.glob("items/*/item.json")):
        assert json.loads(record.read_text())["status"] == "max_rounds"
        settings = json.loads((record.parent / "trace.json").read_text())["settings"]
        assert settings["decoding_path"]["path"] == PATHS[kind]
