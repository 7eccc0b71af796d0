"""``python -m sam3_agent``: see ``sam3_agent.cli.main`` (the same command as the ``sam3-agent`` script)."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
