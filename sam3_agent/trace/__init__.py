"""Saved runs: a trace encoded into its files (schema 2), decoded back (and schema 1 migrated), written after
every round, and read within bounds when the file comes from outside (``safe_read``, ``safe_decode``).

- ``io``: ``save_trace`` / ``load_trace`` (a trace, not a bundle) and ``TraceWriter``, the entry points; the public
  ``sam3_agent.load_trace`` that also reads bundles is ``correct.saved``.
- ``file_kind``: what kind of saved file a path or an opened ``.zip`` is (trace folder, trace.json, trace or bundle
  ``.zip``), decided once for every loader.
- ``encode`` / ``decode`` / ``schema_v1``: the format; ``writer``: atomic folder writes and the per-round writer.
- ``out_folder``: an output folder checked before any model loads without creating it, and made once a run starts.
- ``safe_read``: bounded reading of a ``.zip`` or a folder of files, and ``reading``, the boundary every loader
  runs inside; ``safe_decode``: images and masks checked against the photo before decoding, one budget per load.

May import: the ground floor, ``imaging`` (views are drawn again on load) and ``agent.output_parts`` (the reasoning
of a round saved before it was stored). Never ``correct``: a trace stores hand edits as the ground floor's
``edit_ops`` records.
"""
