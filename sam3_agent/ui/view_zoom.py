"""The script that opens a verdict card's view larger: a click, a tap, or Enter / Space on its button.

The verifier's views on verdict cards (``ui.html``: ``button.card-view`` holding an ``img``) are shown about 140 px
wide; the page already holds each at up to ``html.CARD_SIDE`` px. A press opens that picture at its own size (never
upscaled; shrunk only to fit the window) in a modal ``<dialog>``, the browser's own: focus moves into it and stays
there, Esc closes it. A click or tap on the picture, around it or on "Close" closes it too, and the focus goes back
to the button. Written here because Gradio has no enlarge-on-click for pictures inside a ``gr.HTML``, and the rounds'
HTML is replaced as a run goes on: the dialog lives outside it (one per page), so a new round arriving while it is
open leaves it open.

Given to a ``gr.HTML`` as (part of) its ``js_on_load``: it handles the buttons inside that component (``element``).
"""

from __future__ import annotations

VIEW_ZOOM = """
element.addEventListener('click', (event) => {
  const opener = event.target.closest('button.card-view');
  const small = opener && element.contains(opener) ? opener.querySelector('img') : null;
  if (!small) return;
  let dialog = document.getElementById('view-zoom');
  if (!dialog) {
    dialog = document.createElement('dialog');
    dialog.id = 'view-zoom';
    dialog.innerHTML = '<figure><img class="view-zoom-image" alt=""><figcaption></figcaption></figure>'
      + '<button type="button" class="view-zoom-close">Close (Esc)</button>';
    dialog.addEventListener('click', (e) => {
      if (e.target === dialog || e.target.closest('.view-zoom-image, .view-zoom-close')) dialog.close();
    });
    dialog.addEventListener('close', () => {
      if (dialog.__opener && dialog.__opener.isConnected) dialog.__opener.focus();
    });
    document.body.appendChild(dialog);
  }
  const big = dialog.querySelector('img');
  big.src = small.src;
  big.alt = small.alt;
  dialog.querySelector('figcaption').textContent = small.alt;
  dialog.setAttribute('aria-label', small.alt);
  dialog.__opener = opener;
  dialog.showModal();
  dialog.querySelector('.view-zoom-close').focus();
});
"""
