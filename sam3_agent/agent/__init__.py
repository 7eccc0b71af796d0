"""The agent: the loop of rounds, its context policy, the four tools, mask verification, reading the model's
replies, and the prompt texts.

- ``loop``: ``Agent`` and ``AgentConfig``; ``Agent.run`` yields the events of one run and ends with its ``Trace``.
- ``context``: which messages of the conversation go into the next request (pure: derived from the rounds so far).
- ``tools`` / ``agent.tool_specs``: the model's action space and each tool's checks and effects.
- ``verify``: ``examine_each_mask``'s one isolated VLM call per mask.
- ``parsing`` / ``agent.call_json``: ``<think>``, tool calls and verdicts read from the model's text.
- ``prompts``: the system prompts and every feedback message, read from ``prompts/``.

May import: the ground floor, ``imaging``, ``sam``, ``vlm`` (its protocol and image limits). Never ``trace``,
``correct`` or any front end.
"""
