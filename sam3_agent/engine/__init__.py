"""The inference engine: local Qwen-VL decoding with prompt-prefix reuse, batching and seeded sampling.

Modules: ``qwen_engine`` (the narrow interface ``QwenEngine``: conversations in, text out; its answers and
faults in ``decoded``), ``qwen_prepare`` (conversations to model inputs; ``qwen_tools``: the native tool format's function schema for a
chat template that drops it), ``qwen_inputs`` (request encoding,
each image and text piece once), ``qwen_request`` (a tokenized request with its image spans and 3-D positions),
``kv_prefix`` (the prefix KV store), ``qwen_decode`` (the cached, batched decoder), ``row_caches`` (the rows'
caches, stacked into one batch), ``decoder_thread`` / ``generate_thread`` (the decoder and ``generate`` run in
a worker thread), ``workers`` (the pieces both share), ``sampling`` (how each token is chosen), ``decoding``
(per-model defaults), ``usage`` (work counters). The agent, the verifier and the UI never import it: they talk
to the ``vlm.base.VLM`` protocol, which ``vlm.transformers_qwen`` implements on top of this package.

The engine relies on ``transformers`` internals beyond its public ``generate``: ``DynamicCache`` built from
per-layer tensors (``DynamicCache(layers, config=...)``), the ``cache=`` and ``logits_to_keep=`` forward
arguments, ``model.model.get_rope_index`` (Qwen-VL's 3-D positions) and the processors' chat-template output.
``TRANSFORMERS_VERSION`` names the version it was written and verified against; requirements.txt pins the
same (a test checks both agree). Check the conformance suite (tests/test_engine_conformance.py) and the
mutation script (tests/mutations.py) before moving to another version.
"""

from __future__ import annotations

import logging

TRANSFORMERS_VERSION = "5.24.0"

logger = logging.getLogger(__name__)


def check_transformers_version() -> bool:
    """True when the installed ``transformers`` is ``TRANSFORMERS_VERSION``; logs a warning when it is not."""
    import transformers

    if transformers.__version__ == TRANSFORMERS_VERSION:
        return True
    logger.warning(
        "the inference engine was verified with transformers %s, this is %s: run tests/test_engine_conformance.py "
        "before relying on the prefix cache (or use --no-prefix-cache)", TRANSFORMERS_VERSION, transformers.__version__,
    )
    return False
