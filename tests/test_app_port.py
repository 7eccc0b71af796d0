"""``app.py`` on a port that is taken: refused before any model loads, in the app's words (its ``--port`` flag and
variable, never Gradio's ``server_port``), exit status 2 and no traceback; the same if the port is taken while the
models load. In process: the model loading is replaced, and a listening socket takes the port."""

from __future__ import annotations

import signal
import socket

import pytest

import app
from sam3_agent.ui import layout
from sam3_agent.ui.server_port import listen_problem


@pytest.fixture
def taken_port():
    """A port on 127.0.0.1 with a listening socket on it (as another copy of the app would have)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def in_use(port: int) -> str:
    return (f"error: port {port} is already in use on 127.0.0.1 (another copy of the app or another program listens "
            "there): stop it, or start this one on another port with --port N (or GRADIO_SERVER_PORT=N)\n")


@pytest.fixture
def model_loads(monkeypatch, tmp_path):
    """app.main without its process-wide side effects: SIGTERM's handler stays the test's, Gradio's cache goes to
    ``tmp_path``; the list of the settings ``create_demo`` (the model loading) is called with."""
    monkeypatch.setattr(signal, "signal", lambda *args: None)
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    loaded: list = []
    return loaded


def test_a_taken_port_is_refused_before_any_model_loads(taken_port, model_loads, monkeypatch, capsys):
    monkeypatch.setattr(layout, "create_demo", lambda settings: model_loads.append(settings))
    assert app.main(["--preset", "tiny", "--port", str(taken_port)]) == 2
    assert capsys.readouterr().err == in_use(taken_port)
    assert model_loads == []  # no model was loaded


def test_a_port_taken_while_the_models_load_is_said_the_same_way(model_loads, monkeypatch, capsys):
    import gradio as gr

    class NoHandlers:
        def close(self) -> None:
            pass

    with socket.socket() as other:
        def load_then_lose_the_port(settings):  # another program takes the port while the models load
            model_loads.append(settings)
            other.bind(("127.0.0.1", settings.port))
            other.listen()
            with gr.Blocks() as demo:
                gr.Markdown("x")
            return demo, NoHandlers()

        monkeypatch.setattr(layout, "create_demo", load_then_lose_the_port)
        with socket.socket() as probe:  # a port free now
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        assert app.main(["--preset", "tiny", "--port", str(port)]) == 2  # Gradio's own launch failed: no traceback
    assert capsys.readouterr().err == in_use(port)
    assert len(model_loads) == 1


def test_a_free_port_has_no_problem():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    assert listen_problem("127.0.0.1", port) is None


def test_an_address_of_another_machine_is_named_with_the_host_flag():
    problem = listen_problem("192.0.2.1", 7860)  # TEST-NET-1: never an address of this machine
    assert problem == ("cannot listen on 192.0.2.1: it is not an address of this machine; give another with --host "
                       "(or GRADIO_SERVER_NAME)")
