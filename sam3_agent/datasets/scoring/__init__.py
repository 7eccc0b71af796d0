"""Scoring a batch against ground truth: IoU and the summary metrics (``metrics``), each sample scored against
its batch record (``evaluate``), which samples a protocol scores and the published numbers beside them
(``protocols``), and the report files (``report``). Video: DAVIS's J and F per frame (``video_metrics``) and
expressions scored over their videos under a named protocol (``video_evaluate``).
"""
