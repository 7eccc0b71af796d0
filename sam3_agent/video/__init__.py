"""Clips: reading frames, tracking the agent's objects, corrections, video trace, exports.

``clip``: open a video file, a folder or a ``.zip`` of frames within caps (``clip_caps``) and read its frames as they
are needed (``video_file`` through PyAV, ``frame_folder`` for images, ``frame_cache`` bounded); ``clip_info``: a
clip's identity and timing as the video trace stores it.

May import: the ground floor, ``agent``, ``imaging``, ``sam`` and ``vlm``; never ``trace``, ``cli`` or ``ui``.
"""
