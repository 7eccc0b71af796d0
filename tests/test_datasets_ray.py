"""The batch on a real local Ray cluster with two workers on the tiny models: same layout, same results, resumable."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from dataset_fixtures import segment_and_select_script, twenty_items

from sam3_agent.agent.config import AgentConfig
from sam3_agent.datasets.batch.agents import BatchAgents
from sam3_agent.datasets.batch.items import read_items
from sam3_agent.datasets.batch.layout import BatchLayout
from sam3_agent.datasets.batch.ray_runner import run_batch_on_ray
from sam3_agent.datasets.batch.runner import run_batch
from sam3_agent.presets import BackendSettings


def ray_processes() -> set[int]:
    """Process ids of Ray's daemons and workers on this machine (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # not a process, or it ended meanwhile
            continue
        if entry.name.isdigit() and ("raylet" in command or "gcs_server" in command or "ray::" in command):
            found.add(int(entry.name))
    return found


def records(out, items) -> dict[str, dict]:
    layout = BatchLayout(out, items)
    result = {}
    for item in items:
        record = json.loads(layout.record_path(item).read_text())
        record.pop("seconds")
        result[item.id] = record
    return result


@pytest.mark.slow
def test_a_batch_resumed_on_a_local_ray_with_two_workers_gives_the_local_results(tmp_path, caplog):
    items = read_items(twenty_items(tmp_path))
    settings = BackendSettings(preset="tiny", script=str(segment_and_select_script(tmp_path)), device="cpu")
    config = AgentConfig()
    agents = BatchAgents.load(settings, config)
    first, rest = items[:10], items[10:]
    out, reference = tmp_path / "out", tmp_path / "reference"
    for batch, folder in ((first, out), (rest, reference)):  # half the batch locally; the other half for reference
        layout = BatchLayout(folder, batch)
        layout.prepare()
        run_batch(batch, layout, agents)
    before = ray_processes()

    layout = BatchLayout(out, items)
    with caplog.at_level(logging.INFO, logger="sam3_agent.datasets.batch.ray_runner"):
        result = run_batch_on_ray(items, layout, settings, config, workers=2, init_options={"num_cpus": 2})
    assert (result.ran, result.skipped, result.stopped) == (10, 10, False)  # resumed where the local run stopped
    assert result.summary["statuses"] == {"done": 20}
    per_worker = next(r.args[0] for r in caplog.records if r.msg.startswith("items per Ray worker"))
    assert sorted(per_worker) != [0, 10] and sum(per_worker) == 10  # both workers ran items
    assert records(out, rest) == records(reference, rest)  # same answers as on this machine
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["status"] for e in manifest["items"]] == ["done"] * 20

    import ray

    assert not ray.is_initialized()
    assert ray_processes() <= before  # ray.shutdown() left no Ray process behind
