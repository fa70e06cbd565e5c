"""Adapters for trainers that drive their own loop and call into the harness (verl, slime).

Nothing here is imported by `import agentcore_rl_harness`; verl and slime load these modules by
path (`verl_agent_loop.yaml`, `--rollout-function-path`).
"""
