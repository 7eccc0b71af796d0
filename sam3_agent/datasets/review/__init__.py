"""The review store: a reviewer's decision on one item (``decisions``), a batch output opened as a queue
(``queue``), and where a queue may be opened from in a web app (``sources``).
"""
