"""Whether the app can listen where its settings say, asked before any model loads, and said in the app's words.

Gradio finds out only when it launches, after the models have loaded (minutes with real weights), and its message
names its own ``server_port`` argument. ``listen_problem`` binds the address the way Gradio and uvicorn do (a TCP
socket with ``SO_REUSEADDR``, so a port left in TIME_WAIT by a copy that just stopped counts as free) and closes it at
once; ``app.py`` refuses to start when it answers, and says the same if the port is taken between this check and the
launch. No Gradio here: ``app.py`` calls it before importing Gradio and torch.
"""

from __future__ import annotations

import errno
import socket

from .settings import ENVIRONMENT

LOCALHOST = "127.0.0.1"  # Gradio also binds here first, whatever the host: a port taken here stops its launch too


def _bind(host: str, port: int) -> None:
    """Bind ``host:port`` (IPv4 or IPv6, as the address resolves) and close at once; raises ``OSError``."""
    family, kind, proto, _name, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(address)


def listen_problem(host: str, port: int) -> str | None:
    """What keeps the app from listening on ``host:port``, in words that name the app's own flags and environment
    variables; ``None`` when it can listen there.

    Args:
        host: the address to listen on (``--host``), a name or an IPv4/IPv6 address (brackets allowed).
        port: the TCP port (``--port``).
    """
    flags = f"--port N (or {ENVIRONMENT['port']}=N)"
    for address in dict.fromkeys((host, LOCALHOST)):
        try:
            _bind(address, port)
        except socket.gaierror as error:
            return (f"cannot listen on {host}: the address does not resolve ({error.strerror}); give another with "
                    f"--host (or {ENVIRONMENT['host']})")
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return (f"port {port} is already in use on {address} (another copy of the app or another program "
                        f"listens there): stop it, or start this one on another port with {flags}")
            if error.errno == errno.EACCES:
                return (f"port {port} needs administrator rights on this system: choose a port above 1023 with "
                        f"{flags}")
            if error.errno == errno.EADDRNOTAVAIL:
                return (f"cannot listen on {host}: it is not an address of this machine; give another with --host "
                        f"(or {ENVIRONMENT['host']})")
            return f"cannot listen on {address} port {port} ({error.strerror or error}): choose another with {flags}"
    return None
