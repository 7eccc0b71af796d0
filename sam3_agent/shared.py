"""Objects shared by every session of a process (loaded models, the app's handlers): a copy is the object itself.

Gradio deep-copies the page configuration on every page load and ``gradio_client`` connection, ``gr.State``
delete callbacks included. A callback bound to an object that reached the loaded models copied the models on
every page load (with real weights the app grew from 7 GB to over 20 GB and was killed). Models are loaded once
per process and shared by design, so copying anything that holds them hands back the same object. Pickling is
unaffected (``spaces.GPU`` pickles arguments across processes; those classes define their own pickling).
"""

from __future__ import annotations

from typing import Any


class SharedObject:
    """Mixin: ``copy.copy`` and ``copy.deepcopy`` return the object itself (it is shared, never duplicated)."""

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self
