"""Run limits shared by the agent and every front end.

Kept free of heavy imports (no torch, no Gradio), so a front end can show them, e.g. in
``python app.py --help``, before any model library loads.
"""

DEFAULT_MAX_ROUNDS = 30  # the round budget of a run unless one is given
MAX_ROUNDS_LIMIT = 100  # the largest round budget a run accepts (CLI, app and library alike)
