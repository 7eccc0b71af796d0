"""SAM 3 behind its protocols: the text-prompt segmenter, the point-prompt model (the tracker) with the checks of its
clicks and boxes (``prompts``), the mask-prompt video tracker (``video_tracker``, its memory window and resumable
state in ``video_memory``), the cache of image encodings they share and the one vision backbone they share
(``shared_backbone``).

May import: the ground floor and ``models`` (checked loading).
"""
