"""Clips: reading frames, tracking the agent's objects through them, corrections, the video trace, exports.

- ``clip``: open a video file, a folder or a ``.zip`` of frames within caps (``clip_caps``) and read its frames as
  they are needed (``video_file`` through PyAV, ``frame_folder`` for images, ``frame_cache`` bounded); ``clip_info``:
  a clip's identity and timing as the video trace stores it.
- ``tracks``: the objects and their masks per frame (RLE), and which frames a fixed mask re-propagates;
  ``propagate``: tracker calls over the clip into ``Tracks``.
- ``run``: the image agent on a keyframe, its answer tracked forward and backward (``VideoAgent``, ``VideoRun``);
  ``newcomers``: the opt-in search for objects that appear later; ``corrections``: fixes by hand, with undo.
- ``records`` / ``events``: the video trace and the events of a run; ``saved``: the video trace on disk;
  ``export``: palette PNGs, YouTube-VIS JSON, the overlay video.

May import: the ground floor, ``imaging``, ``sam``, ``vlm``, ``agent`` and ``trace``. Never ``correct``,
``presets``, ``datasets`` or a front end.
"""
