"""The command line, ``python -m sam3_agent``: ``run`` and ``export`` (``main``), ``batch`` and ``eval``
(``datasets``), and the model and agent flags declared once for every subcommand and the app (``flags``).

May import: everything below it (the public API, ``presets``, ``datasets`` and the wings). Nothing below it
imports it.
"""
