"""The "Video" tab: a clip in, a keyframe chosen on a scrubber, the agent's rounds on it as they stream, the tracks as
they grow, the result (overlay video, objects, downloads), a frame fixed in the Correct tab and re-propagated, and the
``/segment_video`` API.

``clips`` (the app's caps and opening an upload), ``session`` (a tab's clip state and its bounded store), ``frames``
(a frame with its objects, for the page), ``progress`` (the tracking bar and what a screen reader is told),
``screen`` (a run's events folded into what the tab shows), ``fixes`` (a frame handed to the Correct tab and its
mask read back), ``exports`` (the downloads), ``gpu_time`` (what a clip asks of ZeroGPU), ``outputs`` (the tab's
component values), ``handlers``, ``api`` and ``layout``.

No Gradio in ``clips``, ``session``, ``frames``, ``progress``, ``screen``, ``fixes``, ``exports`` and ``gpu_time``.
"""
