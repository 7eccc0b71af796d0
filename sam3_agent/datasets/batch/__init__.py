"""Running a batch: items (photos and clips) read from a JSONL file or a folder (``items``), clips checked within
their caps before anything runs (``clip_checks``), one record per finished item (``records``), the output folder
(``layout``) and its dataset-level files (``outputs``, written atomically by ``files``), a fresh agent per item
(``agents``), items in flight sharing one model's batches (``coalesce``), on one machine (``runner``; a clip:
``video_runner``) or on Ray (``ray_runner``, clips sent as ``clip_payload``).
"""
