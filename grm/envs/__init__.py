"""Environments for multi-turn, tool-using episodes: the ``Environment`` protocol and its loader
(``base``), tool-call parsing and tool prompts (``tool_calls``), the tool sandbox (``sandbox``),
the tools (``tools``), the shipped environments (``calc``, ``clarify``, ``revise``), an environment's tasks
for ``grm eval --env`` (``tasks``), ``grm envs`` (``cli``), and the episode runner (``episodes``,
with the context's tokens from ``chat_tokens`` and deadlines on env code from ``bounded``). The
trajectory an episode produces is ``grm.data.trajectory.Trajectory``, below both this package and
the judges.

Nothing is imported here: ``import grm.envs`` stays instant.
"""
