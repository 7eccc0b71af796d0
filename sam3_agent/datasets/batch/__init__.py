"""Running a batch: items read from a JSONL file or a folder (``items``), one record per finished item
(``records``), the output folder (``layout``) and its dataset-level files (``outputs``, written atomically by
``files``), a fresh agent per item (``agents``), items in flight sharing one model's batches (``coalesce``), on
one machine (``runner``) or on Ray (``ray_runner``).
"""
