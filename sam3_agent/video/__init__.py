"""Clips: reading frames, tracking the agent's objects through them, corrections, the video trace, exports.

May import: the ground floor, ``imaging``, ``sam``, ``agent`` and ``trace``. Never ``correct``, ``presets`` or a
front end.
"""
