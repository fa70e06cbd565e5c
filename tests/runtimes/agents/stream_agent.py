"""A generator handler: BedrockAgentCoreApp streams each value as a `data:` line."""

from bedrock_agentcore import BedrockAgentCoreApp

my_app = BedrockAgentCoreApp()  # not named `app`: found as the module's only instance


@my_app.entrypoint
def invoke(payload):
    for step in range(3):
        yield {"step": step}
    yield {"answer": payload["x"] * 2}
