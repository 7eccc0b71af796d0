"""``python -m sam3_agent.smoke``: one command that shows the product works with real weights on a real GPU.

It checks, in about ten minutes on one H100/H200-class GPU with ``facebook/sam3`` and the VLM in the Hugging Face
cache: the environment and versions; that both models load (bfloat16 VLM on CUDA, no weight missing); SAM 3 on the
cat photo in float32 and bfloat16 (scores and masks compared); the first main request on a photo (does it parse,
``<tool>`` or ``<tool_call>``?); the fast decoding paths against plain ``generate`` (the first divergent token) and
which paths the model used (prefix reuse and batched verification, or plain ``generate`` and why: any
image-text-to-text model loads); the example queries end to end within a round budget; optionally a Thinking model's
first request; and that the app's page loads without copying a model. Each check records its time and peak GPU
memory; the results are written as JSON and printed as a summary.

Without CUDA, or without the weights in the cache, it stops at once with a message and its own exit code.
``--preset tiny --allow-cpu`` runs every check on the tiny random-weight models on the CPU (what the tests do;
``--tiny-vlm`` picks the family: Qwen2.5-VL, Qwen3-VL, Qwen3.5, Qwen3.5-MoE, or Gemma 3 on the plain path): then
only code paths are checked, not answers.
"""
