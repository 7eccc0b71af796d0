"""Getting weights onto a device: checked ``from_pretrained`` loads, a look at the Hugging Face Hub first, the GPU
memory plan, and Hugging Face ZeroGPU.

May import: the ground floor only.
"""
