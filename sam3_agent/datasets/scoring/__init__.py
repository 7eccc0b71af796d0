"""Scoring a batch against ground truth: IoU and the summary metrics (``metrics``), each sample scored against
its batch record (``evaluate``), which samples a protocol scores and the published numbers beside them
(``protocols``), and the report files (``report``).
"""
