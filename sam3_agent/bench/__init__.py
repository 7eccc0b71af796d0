"""Benchmarks, each a command: the speed of one agent run (``python -m sam3_agent.bench``), what a run costs
outside the models (``python -m sam3_agent.bench.nonmodel``) and batch throughput (``python -m
sam3_agent.bench.batch``) and how legible the overlay's numbers are at 10 to 200 masks (``python -m
sam3_agent.bench.labels``), the bytes the Run tab streams for a long reasoning (``python -m
sam3_agent.bench.streaming``), the fast path against plain ``generate`` on each tiny model family (``python -m
sam3_agent.bench.families``, over ``run``'s scripted run) and the VLM tokens of a run against the reference's
(``python -m sam3_agent.bench.tokens``, counted by ``token_count``), and tracking a clip, ours against
transformers' plain recipes (``python -m sam3_agent.bench.video``, each case run by ``video_run``).

The speed benchmark (``__main__``) runs a fixed scripted run (segment_phrase twice, examine_each_mask over 6
masks, select_masks_and_return) on a real photo, once with every optimisation off and once with all on, in one
process. The VLM is the ``small`` preset (real tokenizer, prompts and image-token counts; random weights); its
text is scripted, but every call still runs the model's real prefill and as many decode steps as its scripted
reply has tokens (``doubles``). ``run`` measures one mode and formats the table, ``checks`` compares the modes,
``costs`` measures a decode step against a prompt token.

The non-model benchmark (``nonmodel``) measures each case in a process of its own (``nonmodel_run``) on a fixed
scene (``scene``), beside Meta's reference loop (``reference_loop``) when it is installed.

May import: everything below it (it sits on the top floor, beside ``smoke``), and Gradio, to drive the app.
"""
