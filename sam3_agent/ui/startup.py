"""What the page says about the models at start: the first-start message when they could not be loaded, and
the demo note when they are random or scripted. No Gradio here.

The first-start message is the one place that explains missing models (the page shows it once, Run stays
off): which models this launch needs, which of them are not on this machine, the Hub login for the gated
SAM 3, and the offline way to try the app.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path

from ..package_files import EXAMPLE_SCRIPT, shown_path
from .settings import AppSettings
from .view import sentence

GATED_SAM3 = "facebook/sam3"  # gated on the Hub: its licence must be accepted before it downloads


def offline_try() -> str:
    """The command that starts the app offline with the scripted demo (the example script as typed from here)."""
    return f"python app.py --preset tiny --script {shown_path(EXAMPLE_SCRIPT)}"


@dataclass(frozen=True)
class NeededModel:
    """A model this launch loads: its role (``"SAM 3"``, ``"VLM"``), Hub id or folder, and whether it is here."""

    role: str
    model_id: str
    present: bool


def _present(model_id: str) -> bool:
    from ..models.hub import is_cached, is_local_folder

    if is_local_folder(model_id):
        return Path(model_id).expanduser().is_dir()
    return is_cached(model_id)


def needed_models(settings: AppSettings) -> list[NeededModel]:
    """The weights a ``real`` launch loads (SAM 3, and the local VLM unless a server or a script replaces it);
    none for the ``tiny`` preset, which builds its own."""
    backend = settings.backend
    if backend.preset != "real":
        return []
    from ..sam.segmenter import DEFAULT_SAM3_MODEL

    ids = [("SAM 3", backend.sam3_model or DEFAULT_SAM3_MODEL)]
    if not backend.vlm_server and not backend.script:
        from ..vlm.qwen_load import DEFAULT_VLM_MODEL

        ids.append(("VLM", backend.vlm_model or DEFAULT_VLM_MODEL))
    return [NeededModel(role, model_id, _present(model_id)) for role, model_id in ids]


def first_start_message(models: list[NeededModel], load_error: str) -> str:
    """The one message of a start whose models could not be loaded (HTML, ``div.notice.notice-missing``)."""
    missing = [m for m in models if not m.present]
    items = []
    for model in missing:
        where = "no such folder" if model.model_id.startswith(("/", "./", "../", "~")) else "not downloaded yet"
        gated = (f' It is gated: accept its licence on <a href="https://huggingface.co/{GATED_SAM3}" target="_blank">'
                 f"its Hub page</a>, then log in with <code>hf auth login</code>."
                 if model.model_id == GATED_SAM3 else "")
        items.append(f"<li>{escape(model.role)}: <code>{escape(model.model_id)}</code> ({where}).{gated}</li>")
    if missing:
        head = "Run is off: the models are not on this machine yet."
        body = (f"<ul>{''.join(items)}</ul>They download when the app starts on a machine that reaches the "
                "Hugging Face Hub (about 20 GB); then start the app again.")
    else:
        head = "Run is off: the models could not be loaded."
        body = escape(sentence(load_error))
    return (
        f'<div class="notice notice-missing"><b>{escape(head)}</b> {body}<br>To try the app now without them: '
        f"<code>{escape(offline_try())}</code> (tiny random-weight models built offline: the rounds show how the app "
        "works, not real answers)."
        f'<details><summary>Details</summary><pre>{escape(load_error)}</pre></details></div>'
    )


def demo_note(settings: AppSettings) -> str | None:
    """A one-line note (HTML, ``div.notice.notice-demo``) when the models are random or scripted, else ``None``."""
    backend = settings.backend
    script = Path(backend.script).name if backend.script else None
    if backend.preset == "tiny" and script:
        what = (f"SAM 3 is a tiny model with random weights and the VLM's replies are replayed from "
                f"<code>{escape(script)}</code>")
    elif backend.preset == "tiny":
        return ('<div class="notice notice-demo"><b>Demo mode:</b> both models are tiny with random weights, built '
                "on this machine: the VLM writes random text, so a run shows the code paths only and usually spends "
                "its whole round budget. For the guided demo, replay the example replies: "
                f"<code>{escape(offline_try())}</code>.</div>")
    elif script:
        what = f"the VLM's replies are replayed from <code>{escape(script)}</code> (SAM 3 is the real model)"
    else:
        return None
    return (f'<div class="notice notice-demo"><b>Demo mode:</b> {what}. The rounds show how the app works, '
            "not real answers.</div>")
