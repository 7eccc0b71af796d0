"""The Gradio app: one folder per tab (``run``, ``inspect``, ``correct``, ``review``) and what they share.

Shared here: ``layout`` (the page: the tabs, their hand-offs and launching; each tab's own ``layout`` builds it),
``settings`` (launch settings from flags and environment), ``startup`` (what the page says about the models at start),
``view`` (rounds and traces as plain records), ``run_view`` (a live run's screen, folded from its events),
``context_view`` (the context panel's record), ``html`` (those records as HTML), ``round_clicks`` (the script that
makes a click on a round a select event), ``view_zoom`` (the script that opens a verdict card's view larger),
``memory_size`` (what bounds a per-session store), ``refusals`` (a request refused for its input: one warning line,
no traceback), ``server_port`` (whether the app can listen where it is told, asked before any model loads),
``page.css``.

Only this package imports Gradio (besides the tools that drive the app, ``bench`` and ``smoke``); ``settings``,
``server_port``, ``view``, ``html`` and the runner do not, so they can be used and tested without it. May import
everything below it, ``cli.flags`` included.
"""
