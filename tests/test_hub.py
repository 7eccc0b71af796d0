"""Failing fast when the Hugging Face Hub cannot be reached."""

from __future__ import annotations

import pytest
from huggingface_hub import constants as hub_constants

from sam3_agent import hub
from sam3_agent.errors import BackendError


@pytest.fixture
def offline_hub(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens there
    monkeypatch.setattr(hub, "_reachable", None)
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
    assert hub.hub_reachable.__module__ == "sam3_agent.hub" and hub._reachable is None


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
