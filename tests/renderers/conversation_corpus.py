"""Seeded random conversations for the conformance tests, and their reference-template form.

A `Case` is what a user hands the renderer (messages, with tools declared through a system prefix)
and what the reference template gets (Hugging Face-style messages and `tools=`). Contents mix empty,
multi-line, whitespace-padded and unicode text; Qwen cases add reasoning, tool calls and tool
responses; Llama tool cases add one call per assistant turn and its result.
"""

import json
import random
from dataclasses import dataclass
from typing import Any

from renderers import Message, ToolCall, ToolSpec

CONTENTS = [
    "",
    "Hello",
    "What is 2 + 2?",
    "Line one\nLine two\n\nLine four after a blank line",
    "  padded with spaces  ",
    "\nstarts with a newline",
    "ends with a newline\n",
    "\n\nsurrounded by blank lines\n\n",
    "Unicode: café, naïve, 日本語のテキスト, Ελληνικά, emoji 🦀🚀, e\u0301 (combining)",
    "Tabs\tand  double  spaces",
    "Code:\n```python\ndef f(x):\n    return x * 2\n```",
    'JSON-looking text: {"a": [1, 2, 3], "b": null}',
    "Markup <b>bold</b> & ampersands; 'quotes' and \"double quotes\"",
    "Numbers 1234567890 and 3.14159, 1e-5",
    "A longer sentence that goes on for a while, with commas, clauses, and a final period.",
]
REASONINGS = ["", "Let me think.", "Step 1: add.\nStep 2: check.", "\nPadded reasoning\n", "考えます 🤔"]
TOOLS: list[ToolSpec] = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {
        "name": "add",
        "description": "Add two numbers – returns their sum.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
]
ARGUMENTS: list[tuple[str, dict[str, Any]]] = [
    ("get_weather", {"city": "Paris"}),
    ("get_weather", {"city": "São Paulo"}),
    ("add", {"a": 2, "b": 3.5}),
    ("add", {"a": -1, "b": 10}),
]
TOOL_RESULTS = ['{"temperature": 21, "unit": "C"}', "5.5", "", "multi\nline result", "错误: not found"]


@dataclass
class Case:
    """One conversation, as the renderer sees it and as the reference template sees it."""

    system_prompt: str | None
    tools: list[ToolSpec] | None
    messages: list[Message]  # without the system message

    def renderer_messages(self, tools_prefix: list[Message] | None = None) -> list[Message]:
        """System (or the tool-declaring prefix) first, then the conversation."""
        if tools_prefix is not None:
            return tools_prefix + self.messages
        system = (
            [Message(role="system", content=self.system_prompt)] if self.system_prompt is not None else []
        )
        return system + self.messages

    def reference_messages(self) -> list[dict[str, Any]]:
        """Hugging Face-style messages: reasoning in `reasoning_content`, OpenAI-style tool calls."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        return system + [_reference_message(message) for message in self.messages]

    def reference_tools(self) -> list[dict[str, Any]] | None:
        if self.tools is None:
            return None
        return [{"type": "function", "function": dict(tool)} for tool in self.tools]


def _reference_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    if "thinking" in message:
        out["reasoning_content"] = message["thinking"]
    if "tool_calls" in message:
        out["tool_calls"] = [
            {"type": "function", "function": {"name": call.function.name, "arguments": json.loads(call.function.arguments)}}
            for call in message["tool_calls"]
        ]
    return out


def chat_corpus(seed: int, count: int = 60) -> list[Case]:
    """Plain chats: optional system prompt, 1-6 turns alternating user/assistant from a user turn."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        system = rng.choice(CONTENTS) if rng.random() < 0.5 else None
        turns = rng.randint(1, 6)
        messages = [
            Message(role="user" if turn % 2 == 0 else "assistant", content=rng.choice(CONTENTS))
            for turn in range(turns)
        ]
        cases.append(Case(system, None, messages))
    return cases


def qwen_corpus(seed: int, count: int = 60, thinking: bool = True) -> list[Case]:
    """Qwen chats: plain turns plus reasoning (if `thinking`), tool calls and tool responses."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        tools = TOOLS if rng.random() < 0.4 else None
        # An empty system prompt with tools means "none" to create_conversation_prefix_with_tools.
        system = rng.choice(CONTENTS if tools is None else CONTENTS[1:]) if rng.random() < 0.5 else None
        messages: list[Message] = []
        for _ in range(rng.randint(1, 4)):
            messages += _qwen_exchange(rng, use_tools=tools is not None, thinking=thinking)
        if rng.random() < 0.5:
            messages = messages[: rng.randint(1, len(messages))]
        cases.append(Case(system, tools, messages))
    return cases


def _qwen_exchange(rng: random.Random, use_tools: bool, thinking: bool) -> list[Message]:
    """A user turn and the assistant's answer, possibly through tool calls and responses."""
    user_content = rng.choice(CONTENTS)
    if rng.random() < 0.1:  # a tool response written by hand as a user turn
        user_content = f"<tool_response>\n{rng.choice(TOOL_RESULTS)}\n</tool_response>"
    messages = [Message(role="user", content=user_content)]
    if use_tools and rng.random() < 0.7:
        calls = [ToolCall.of(*rng.choice(ARGUMENTS)) for _ in range(rng.randint(1, 2))]
        messages.append(
            _assistant(rng, thinking, content=rng.choice(["", "Let me check.", "Checking\n"]), calls=calls)
        )
        messages += [Message(role="tool", content=rng.choice(TOOL_RESULTS)) for _ in calls]
    messages.append(_assistant(rng, thinking, content=rng.choice(CONTENTS)))
    return messages


def _assistant(
    rng: random.Random, thinking: bool, content: str, calls: list[ToolCall] | None = None
) -> Message:
    message = Message(role="assistant", content=content)
    draw = rng.random()
    if thinking and draw < 0.4:
        message["thinking"] = rng.choice(REASONINGS)
    elif thinking and draw < 0.5:  # reasoning written inline, for the template to split
        message["content"] = f"<think>\n{rng.choice(REASONINGS)}\n</think>\n\n{content}"
    if calls:
        message["tool_calls"] = calls
    return message


def llama_tool_corpus(seed: int, count: int = 60) -> list[Case]:
    """Llama-3.1 chats: tools (mostly), then exchanges in which the assistant may make one call (an
    assistant turn holding only the call), read its result, and answer."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        tools = TOOLS if rng.random() < 0.8 else None
        system = rng.choice(CONTENTS) if rng.random() < 0.5 else None
        messages: list[Message] = []
        for _ in range(rng.randint(1, 3)):
            messages.append(Message(role="user", content=rng.choice(CONTENTS)))
            if tools is not None and rng.random() < 0.7:
                call = ToolCall.of(*rng.choice(ARGUMENTS))
                messages.append(Message(role="assistant", content="", tool_calls=[call]))
                messages.append(Message(role="tool", content=rng.choice(TOOL_RESULTS)))
            messages.append(Message(role="assistant", content=rng.choice(CONTENTS)))
        if rng.random() < 0.5:
            messages = messages[: rng.randint(1, len(messages))]
        cases.append(Case(system, tools, messages))
    return cases
