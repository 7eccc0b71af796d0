"""Scoring a batch against ground truth: the metrics (``metrics``), the per-sample scores (``evaluate``) and
the report (``report``).
"""
