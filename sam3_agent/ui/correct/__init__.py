"""The Correct tab: one trace's hand corrections (the ``session`` record and its ``actions``, on a view of the photo,
``geometry``, with the canvas ``tools``), a trace read from an upload (``trace_upload``), kept per browser session in a
bounded store (``store``), shown on one canvas (``view``, ``canvas.js``), laid out (``layout``) and wired
(``handlers``).
"""
