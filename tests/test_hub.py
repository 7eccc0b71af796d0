"""Failing fast when the Hugging Face Hub cannot be reached."""

from __future__ import annotations

import pytest
from huggingface_hub import constants as hub_constants

from sam3_agent.errors import BackendError
from sam3_agent.models import hub


@pytest.fixture
def offline_hub(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens there
    monkeypatch.setattr(hub, "_reachable", None)
    monkeypatch.setattr(hub, "_switched_offline", False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", "/nonexistent-hf-cache")


def test_unreachable_hub_and_uncached_model_fail_at_once_naming_the_model(offline_hub):
    with pytest.raises(BackendError) as error:
        hub.check_model_source("facebook/sam3", "SAM 3 model")
    message = str(error.value)
    assert "'facebook/sam3'" in message and "cannot be reached" in message and "local folder" in message
    assert hub_constants.HF_HUB_OFFLINE is True  # later loads use the cache only


def test_local_folders_are_not_checked(offline_hub, tmp_path):
    hub.check_model_source(str(tmp_path), "SAM 3 model")
    assert hub.hub_reachable.__module__ == "sam3_agent.models.hub" and hub._reachable is None


def test_reachable_hub_is_probed_once(monkeypatch):
    calls = []

    class Connection:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def connect(address, timeout):
        calls.append((address, timeout))
        return Connection()

    monkeypatch.setattr(hub, "_reachable", None)
    monkeypatch.setattr(hub.socket, "create_connection", connect)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example:8443")
    assert hub.hub_reachable() and hub.hub_reachable()
    assert calls == [(("hub.example", 8443), hub.CONNECT_TIMEOUT_S)]


def test_with_offline_mode_on_an_uncached_model_gets_the_projects_message(monkeypatch):
    monkeypatch.setattr(hub, "_reachable", None)
    monkeypatch.setattr(hub, "_switched_offline", False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)  # HF_HUB_OFFLINE=1 in the environment
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", "/nonexistent-hf-cache")
    with pytest.raises(BackendError, match=r"cannot load the VLM 'Qwen/Qwen3-VL-8B-Instruct': offline mode is on "
                                           r"\(HF_HUB_OFFLINE=1\) and the model is not in the local cache"):
        hub.check_model_source("Qwen/Qwen3-VL-8B-Instruct", "VLM")
    assert hub._reachable is None  # no probe: offline means offline


def test_after_a_failed_probe_every_later_uncached_model_gets_the_same_message(offline_hub, monkeypatch):
    cached = {"facebook/sam3"}
    monkeypatch.setattr(hub, "is_cached", lambda model_id: model_id in cached)
    hub.check_model_source("facebook/sam3", "SAM 3 model")  # cached: loads from the cache
    assert hub_constants.HF_HUB_OFFLINE is True
    for model in ("Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"):  # whatever the order of loads
        with pytest.raises(BackendError, match=f"cannot load the VLM '{model}': the Hugging Face Hub "
                                               r"\(http://127.0.0.1:9\) cannot be reached from this machine"):
            hub.check_model_source(model, "VLM")
