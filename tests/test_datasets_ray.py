"""The batch on a real local Ray cluster with two workers on the tiny models: same layout, same results, resumable."""

from __future__ import annotations

import io
import json
import logging
import time
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from dataset_fixtures import segment_and_select_script, twenty_items

from sam3_agent.agent.config import AgentConfig
from sam3_agent.datasets.batch.agents import BatchAgents
from sam3_agent.datasets.batch.items import read_items
from sam3_agent.datasets.batch.layout import BatchLayout
from sam3_agent.datasets.batch.ray_runner import CONNECT_SECONDS, head_endpoint, run_batch_on_ray
from sam3_agent.datasets.batch.runner import run_batch
from sam3_agent.errors import BackendError
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


def dead_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then closed)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_ray_at_a_dead_address_ends_within_the_connect_deadline_naming_it(tmp_path):
    from sam3_agent.cli.main import main

    port = dead_port()
    started = time.monotonic()
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(["batch", "--preset", "tiny", "--script", str(segment_and_select_script(tmp_path)), "--input",
                     str(twenty_items(tmp_path)), "--out", str(tmp_path / "out"), "--ray", f"127.0.0.1:{port}",
                     "--no-progress"])
    assert time.monotonic() - started < CONNECT_SECONDS
    assert code == 3
    assert err.getvalue().splitlines()[-1] == (
        f"error: cannot reach the Ray cluster at 127.0.0.1:{port} (from --ray) within 10 s: Connection refused. Check "
        "that its head is running (`ray status` on the head node), that the host and port are right and that no "
        "firewall blocks them; or leave out ADDRESS to start a local Ray")
    import ray

    assert not ray.is_initialized()


def test_a_stale_ray_address_in_the_environment_is_named_as_such(tmp_path, monkeypatch):
    port = dead_port()
    monkeypatch.setenv("RAY_ADDRESS", f"ray://127.0.0.1:{port}")
    items = read_items(twenty_items(tmp_path))
    settings = BackendSettings(preset="tiny", script=str(segment_and_select_script(tmp_path)), device="cpu")
    with pytest.raises(BackendError) as error:
        run_batch_on_ray(items, BatchLayout(tmp_path / "out", items), settings, AgentConfig())
    assert str(error.value).startswith(f"cannot reach the Ray cluster at ray://127.0.0.1:{port} (from RAY_ADDRESS) "
                                       "within 10 s: Connection refused.")
    assert str(error.value).endswith("; or unset RAY_ADDRESS to start a local Ray")


@pytest.mark.parametrize("address, endpoint", [
    ("ray://head:10001", ("head", 10001)), ("ray://head", ("head", 10001)), ("10.0.0.1", ("10.0.0.1", 6379)),
    ("[::1]:6380", ("::1", 6380)), ("auto", None), ("", None),
])
def test_ray_addresses_are_checked_at_the_port_they_connect_to(address, endpoint):
    assert head_endpoint(address) == endpoint


@pytest.mark.slow
def test_more_workers_than_the_cluster_can_place_run_on_those_placed_and_say_so(tmp_path, caplog):
    items = read_items(twenty_items(tmp_path))[:6]
    settings = BackendSettings(preset="tiny", script=str(segment_and_select_script(tmp_path)), device="cpu")
    layout = BatchLayout(tmp_path / "out", items)
    layout.prepare()
    # the worker that cannot be placed is never started (an actor waiting for a CPU would hold the batch forever:
    # the log lines below say only two were made); no bound on the time, which a busy machine stretches
    with caplog.at_level(logging.INFO, logger="sam3_agent.datasets.batch.ray_runner"):
        result = run_batch_on_ray(items, layout, settings, AgentConfig(), workers=3, init_options={"num_cpus": 2})
    assert (result.ran, result.summary["statuses"]) == (6, {"done": 6})
    assert ("3 Ray workers asked for, but the cluster has room for 2 (2 free CPUs, one per worker): the batch runs on "
            "2; 1 could not be placed") in caplog.messages
    per_worker = next(r.args[0] for r in caplog.records if r.msg.startswith("items per Ray worker"))
    assert len(per_worker) == 2 and sum(per_worker) == 6
