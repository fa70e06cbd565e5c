from bedrock_agentcore import BedrockAgentCoreApp

first = BedrockAgentCoreApp()
second = BedrockAgentCoreApp()


@second.entrypoint
def invoke(payload):
    return {"which": "second"}
