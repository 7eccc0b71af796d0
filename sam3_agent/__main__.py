"""``python -m sam3_agent``: see ``sam3_agent.cli``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
