"""Sanity agents: real BedrockAgentCoreApp apps a task can run instead of its own agent.

`--agentcore-rl-set agent=oracle` submits each row's reference solution (the task's `oracle`),
proving every reward can be reached; `agent=null` answers `{}` without calling the model,
proving silence earns nothing; `agent=spam` fills its directory with junk files and answers with
plausible keys, proving format and volume earn nothing. Both run on the configured runtime like any agent, so the whole
path (sessions, scoring, reports) is exercised.
"""

from __future__ import annotations

# `agent=<name>` -> the app the local runtime serves (module:app).
AGENTS = {
    "oracle": "agentcore_rl_harness.sanity_agents.oracle:app",
    "null": "agentcore_rl_harness.sanity_agents.null:app",
    "spam": "agentcore_rl_harness.sanity_agents.spam:app",
}
# Where the harness puts the oracle's result in the invoke payload (`_rollout`), under agent=oracle only.
ORACLE_KEY = "oracle_result"
