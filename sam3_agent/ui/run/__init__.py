"""The Run tab: a query on a photo, streamed round by round (``handlers``), the models loaded once and a fresh
agent per run (``runner``), and the upload component (``uploads``).
"""
