"""SAM 3 behind its protocols: the text-prompt segmenter, the point-prompt model (the tracker) with the checks of its
clicks and boxes (``prompts``), and the cache of image encodings they share.

May import: the ground floor and ``models`` (checked loading).
"""
