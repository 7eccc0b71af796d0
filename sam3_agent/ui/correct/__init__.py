"""The Correct tab: one trace's hand corrections (``session``), kept per browser session in a bounded store
(``store``), shown on one canvas (``view``, ``canvas.js``), laid out (``layout``) and wired (``handlers``).
"""
