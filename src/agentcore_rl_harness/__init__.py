"""agentcore-rl-harness: RL and evaluation for tool-using agents on Bedrock AgentCore Runtime."""

from .records import Rollout, SamplingParams, SampleResult, Status, Trace
from .tasks import reward, task

__all__ = ["Rollout", "SampleResult", "SamplingParams", "Status", "Trace", "reward", "task"]
__version__ = "0.1.0"
