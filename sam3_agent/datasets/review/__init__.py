"""The review store: a reviewer's decision on one item (``decisions``), a batch output opened as a queue
(``queue``), the reviewed dataset written as COCO (RLE or polygons) or YOLO labels (``exports``), and where a queue
may be opened from in a web app (``sources``).
"""
