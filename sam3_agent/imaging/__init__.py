"""Images made from masks: post-processing of SAM 3's masks and what the model is shown (numbered overlays,
single-mask views, zoomed views).

May import: the ground floor only.
"""
