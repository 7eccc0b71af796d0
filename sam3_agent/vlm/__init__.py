"""VLM backends behind one protocol (``base.VLM``): a local model (``transformers_qwen`` over ``engine``: Qwen-VL and
Qwen3.5 on the engine's fast path, any other image-text-to-text model on plain ``generate``), a scripted one for tests
(``scripted``), and an OpenAI-compatible server.

The server path: ``openai_server`` (the request, the per-call deadline, the stop event, fault finishes retried),
``server_stream`` (the HTTP attempts and their retries), ``sse_answer`` (the body read into deltas),
``server_answer`` (the deltas put together into the text the agent reads), ``server_retry`` (the retry policy and
the wording of faults), ``server_gate`` (how many requests are open at once, lowered after a 429),
``server_sampling`` (the decoding fields sent). ``image_fit`` fits images to the Qwen-VL processor limits.
Imports: the ground floor, ``engine``, and ``imaging.legibility`` (``PixelBounds``: the views' form of the image limits).
"""
