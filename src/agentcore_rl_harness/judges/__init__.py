"""Model roles beside the policy: the judge of judged rewards (`@arl.judge_reward`).

`config.py` is the `roles` node; `clients.py` the judge backends (the policy itself, a local HF
model, an OpenAI-compatible endpoint, Bedrock Converse); `protocol.py` the prompts and the strict
reading of answers; `service.py` retries, the cache, the concurrency limit and usage; `groups.py`
waits for a GRPO group's members; `usage.py` sums usage per role for the report.
"""
