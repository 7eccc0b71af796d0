"""The script that turns a click on a round's button or timeline row into a Gradio "select" event.

Clicks inside an HTML panel become a "select" event whose index is the round number of the button or row
clicked (``[data-round]``): "Context sent" buttons on a run's rounds (Run tab), rows of the Inspect timeline. Given
to a ``gr.HTML`` component as its ``js_on_load``.
"""

from __future__ import annotations

ROUND_CLICKS = """
element.addEventListener('click', (event) => {
  const target = event.target.closest('.ctx-open, .timeline [data-round]');
  if (target && element.contains(target)) {
    trigger('select', {index: Number(target.dataset.round), value: target.dataset.round});
  }
});
"""
