"""The Run tab: a query on a photo, streamed round by round (``handlers``), the models loaded once and a fresh
agent per run (``runner``), a run started from the page's inputs (``start``), a session's run and Run presses
(``slot``), the panel's values (``outputs``), the ``/segment`` API (``api``), the tab and the endpoint on the page
(``layout``) and the upload component (``uploads``).
"""
