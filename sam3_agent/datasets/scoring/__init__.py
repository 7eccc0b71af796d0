"""Scoring a batch against ground truth: IoU and the summary metrics (``metrics``), each sample scored against
its batch record (``evaluate``), and the report files (``report``).
"""
