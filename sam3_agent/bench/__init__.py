"""Speed benchmark of one agent run: ``python -m sam3_agent.bench``.

A fixed scripted run (segment_phrase twice, examine_each_mask over 6 masks, select_masks_and_return)
on a real photo, once with every optimisation off and once with all on, in one process. The VLM is
the ``small`` preset (real tokenizer, prompts and image-token counts; random weights); its text is
scripted, but every call still runs the model's real prefill and as many decode steps as its
scripted reply has tokens.
"""
