"""The agent: the loop of rounds, its context policy, the four tools, mask verification, reading the model's
replies, and the prompt texts.

- ``loop``: ``Agent`` and ``AgentRun``; a run yields the events of its rounds and ends with its ``Trace``;
  ``config``: ``AgentConfig``, the limits and thresholds of a run.
- ``output_parts``: the model's output split into reasoning and the call, as the agent reads it (what a front end
  shows, so that none re-parses model text).
- ``context``: which messages of the conversation go into the next request (pure: derived from the rounds so far).
- ``tools`` / ``agent.tool_specs``: the model's action space and each tool's checks and effects.
- ``verify``: ``examine_each_mask``'s one isolated VLM call per mask; ``verify_groups``: its calls of several
  masks on one view each (``in_groups``).
- ``parsing`` / ``agent.call_json`` / ``agent.bare_calls`` / ``agent.function_calls``: tool calls read from the
  model's text (tagged, written without their tag, or in Qwen3.5's XML style); ``reasoning``: where the reasoning
  ends; ``verdicts``: the verdict grammar (per mask, and a group's one line per mask).
- ``prompts``: the system prompts and every feedback message, read from ``prompts/``; ``tool_format``: the
  reference ``<tool>`` format or the native one (function schema, the model's own call forms, its feedback texts).

May import: the ground floor, ``imaging``, ``sam``, ``vlm`` (its protocol and image limits). Never ``trace``,
``correct`` or any front end.
"""
