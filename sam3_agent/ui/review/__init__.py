"""The "Review a batch" tab: a batch output stepped through item by item, each decision saved beside its
trace (``handlers``, ``layout``).
"""
