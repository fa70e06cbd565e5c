"""agentcore-rl-harness: RL and evaluation for tool-using agents on Bedrock AgentCore Runtime."""

from .judged import judge_reward
from .mcp_servers import McpServer
from .records import Rollout, SamplingParams, SampleResult, Status, Trace
from .run.sandbox import ExecResult, Sandbox
from .tasks import reward, task

__all__ = ["ExecResult", "McpServer", "Rollout", "SampleResult", "SamplingParams", "Sandbox", "Status", "Trace",
           "judge_reward", "reward", "task"]
__version__ = "0.1.0"
