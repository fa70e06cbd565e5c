"""A tool-using arithmetic agent, written the way agents for Bedrock AgentCore Runtime are written.

It is an ordinary ACR app: the harness (or AgentCore itself) POSTs a payload to /invocations, the
agent talks to its model through the plain OpenAI SDK, and runs its one tool in its own process.
During RL the harness adds `payload["_rollout"]` with the gateway's `base_url` and a session
`api_key` (the ART / agentcore-rl-toolkit convention); nothing else here knows about training.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from fractions import Fraction

from bedrock_agentcore import BedrockAgentCoreApp
from openai import OpenAI

app = BedrockAgentCoreApp()

MAX_MODEL_CALLS = 3
MAX_TOKENS = 96

SYSTEM_PROMPT = "You are a calculator assistant. Use the calculator tool, then say the answer."

# Worked examples, sent as real turns: a small model imitates turns far better than prose.
FEW_SHOT = [
    ("What is 12 + 7?", "12 + 7", "19"),
    ("What is 85 - 31?", "85 - 31", "54"),
]


def example_turns() -> list[dict]:
    messages: list[dict] = []
    for index, (question, expression, result) in enumerate(FEW_SHOT):
        call_id = f"example-{index}"
        arguments = json.dumps({"expression": expression})
        messages += [
            {"role": "user", "content": question},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "calculator", "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": result},
            {"role": "assistant", "content": f"The answer is {result}."},
        ]
    return messages


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 12 + 7"}},
                "required": ["expression"],
            },
        },
    }
]

# --- the tool -------------------------------------------------------------------------------

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_MAX_EXPRESSION_CHARS = 200
_MAX_MAGNITUDE = 10**30


def _evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        if abs(node.value) > _MAX_MAGNITUDE:
            raise ValueError("number too large")
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (*_OPERATORS, ast.Div)):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Div):
            if right == 0:
                raise ValueError("division by zero")
            value = left / right
        else:
            value = _OPERATORS[type(node.op)](left, right)
        if abs(value) > _MAX_MAGNITUDE:
            raise ValueError("number too large")
        return value
    raise ValueError(f"unsupported expression element: {ast.dump(node)[:60]}")


def calculate(expression: str) -> str:
    """Evaluate integer arithmetic (+ - * / and parentheses) without eval; ValueError if not."""
    if len(expression) > _MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {_MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc
    value = _evaluate(tree.body)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6g}"


def calculator(expression: str) -> str:
    """The tool as the model sees it: a result, or an error message it can react to."""
    try:
        return calculate(expression)
    except ValueError as exc:
        return f"error: {exc}"


def run_tool_call(name: str, arguments: str) -> str:
    if name != "calculator":
        return f"error: unknown tool {name!r}; the only tool is calculator"
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return "error: arguments must be JSON like {\"expression\": \"12 + 7\"}"
    if not isinstance(args, dict) or not isinstance(args.get("expression"), str):
        return "error: missing the string argument \"expression\""
    return calculator(args["expression"])


def last_integer(text: str) -> int | None:
    matches = re.findall(r"(?<!\d)-?\d+", text or "")
    return int(matches[-1]) if matches else None


# --- the agent ------------------------------------------------------------------------------


@app.entrypoint
def invoke(payload):
    rollout = payload["_rollout"]
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        *example_turns(),
        {"role": "user", "content": payload["prompt"]},
    ]
    reply, tool_calls, turns = "", 0, 0
    for _ in range(MAX_MODEL_CALLS):
        response = client.chat.completions.create(
            model=rollout["model_id"], messages=messages, tools=TOOLS, max_tokens=MAX_TOKENS
        )
        turns += 1
        message = response.choices[0].message
        reply = message.content or ""
        if not message.tool_calls:
            break
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                    for call in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            tool_calls += 1
            result = run_tool_call(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return {"answer": last_integer(reply), "reply": reply, "tool_calls": tool_calls, "turns": turns}


if __name__ == "__main__":
    app.run()
