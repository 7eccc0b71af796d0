"""The "Inspect a trace" tab: a saved trace or bundle stepped through round by round, without a model (``handlers``),
laid out and wired (``layout``).
"""
