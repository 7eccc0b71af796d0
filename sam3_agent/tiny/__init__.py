"""Builders of tiny random-weight models (real architectures, shrunken configs) for offline tests and demos."""

# The tiny VLM architectures (``presets.tiny_model_paths``); the command line and the app offer these choices.
TINY_VLM_KINDS = ("qwen3_vl", "qwen2_5_vl", "qwen3_5", "qwen3_5_moe")
