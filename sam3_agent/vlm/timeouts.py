"""Time limits of a call to a VLM server (``ServerTimeouts``) and the environment variables that set them.

Light on purpose (the standard library and ``errors`` only): the command line's ``--help`` shows these defaults
before any model library loads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import InputError

# Timeout settings: flag destination -> environment variable (read by the CLI and the app alike).
TIMEOUT_ENVIRONMENT = {
    "connect": "SAM3_AGENT_VLM_SERVER_CONNECT_TIMEOUT",
    "read": "SAM3_AGENT_VLM_SERVER_READ_TIMEOUT",
    "deadline": "SAM3_AGENT_VLM_SERVER_DEADLINE",
}


@dataclass(frozen=True)
class ServerTimeouts:
    """Time limits of one call, in seconds.

    Attributes:
        connect: to open the connection.
        read: the longest silence while waiting for the answer to start or between two pieces of it
            (the first piece may wait for a long prompt to be processed).
        deadline: the whole call, retries included: a server that drips tokens or keep-alive comments
            forever is stopped here.

    Raises:
        InputError: a value that is not positive.
    """

    connect: float = 10.0
    read: float = 120.0
    deadline: float = 600.0

    def __post_init__(self) -> None:
        for name in ("connect", "read", "deadline"):
            if not getattr(self, name) > 0:
                raise InputError(f"the VLM server {name} timeout must be a positive number of seconds, "
                                 f"got {getattr(self, name)}")

    @staticmethod
    def resolve(
        connect: float | None = None,
        read: float | None = None,
        deadline: float | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ServerTimeouts:
        """The given values, else those of the ``TIMEOUT_ENVIRONMENT`` variables, else the defaults.

        Raises:
            InputError: a variable that is not a number, or a value that is not positive.
        """
        env = os.environ if environ is None else environ
        given = {"connect": connect, "read": read, "deadline": deadline}
        values: dict[str, float] = {}
        for name, value in given.items():
            raw = env.get(TIMEOUT_ENVIRONMENT[name], "").strip()
            if value is None and raw:
                try:
                    value = float(raw)
                except ValueError:
                    raise InputError(f"environment variable {TIMEOUT_ENVIRONMENT[name]}={raw!r} is not a number "
                                     "of seconds") from None
            if value is not None:
                values[name] = float(value)
        return ServerTimeouts(**values)
