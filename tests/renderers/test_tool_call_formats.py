"""Tool calls in the families beyond Qwen3: Llama-3's JSON calls (`llama3`, `llama3_1`) and Llama-3.1's
built-in calls after `<|python_tag|>` (`llama3_1`), the Hermes format we chose for ChatML (`chatml`,
`smollm2`), and `hf_chat_template`'s declaration and named call formats.

Each family renders a call that `parse_response` reads back (the "sample" is the trained tokens of
the call's turn), and a malformed call parses to ok=False with the raw text kept, never an
exception. Token-exact comparisons with the vendor templates over generated conversations are in
test_conformance.py; here are single conversations and what the templates cannot show.
"""

import json
import pickle
from typing import Any

import numpy as np
import pytest

from recipes_lib.exceptions import ConfigurationError, RendererError
from renderers import Message, Renderer, ToolCall, ToolSpec, TrainOnWhat, get_renderer
from renderers.hf_chat_template import HFChatTemplateRenderer, ToolCallFormat
from renderers.llama3 import Llama31Renderer
from tests.renderers.template_reference import read_template, reference_tokens

WEATHER: ToolSpec = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
QUESTION: Message = {"role": "user", "content": "Weather in São Paulo?"}
CALL = ToolCall.of("get_weather", {"city": "São Paulo"})
BARE_CALL: Message = {"role": "assistant", "content": "", "tool_calls": [CALL]}
TWO_CALLS: Message = {
    "role": "assistant",
    "content": "Let me check both.",
    "tool_calls": [CALL, ToolCall.of("get_weather", '{"city": "Nice"}')],
}
RESULT: Message = {"role": "tool", "content": '{"temperature": 21}'}
ANSWER: Message = {"role": "assistant", "content": "It is 21 °C."}

HERMES_MALFORMED = [
    "<tool_call>\n{not json}\n</tool_call>",
    '<tool_call>\n{"arguments": {"city": "Nice"}}\n</tool_call>',  # no name
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Nice"}}',  # unterminated
    '<tool_call>\n{"name": "get_weather", "arguments": "Nice"}\n</tool_call>',  # arguments not an object
]
LLAMA3_MALFORMED = [
    '{"name": "get_weather", "parameters": {city: Nice}}',
    '{"parameters": {"city": "Nice"}}',  # no name
    '{"name": "get_weather", "parameters": {"city": "Nice"}',  # unterminated
    '{"name": "get_weather", "parameters": {}} {"name": "get_weather", "parameters": {}}',  # two calls
]
PYTHON_TAG_MALFORMED = [
    '<|python_tag|>brave_search.call(query="Nice"',  # unterminated
    "<|python_tag|>brave_search.call(query=Nice)",  # unquoted
    '<|python_tag|>brave_search.call("Nice")',  # positional
    '<|python_tag|>brave_search.call(query="a", query="b")',  # a keyword twice
    '<|python_tag|>brave_search.call(query="Nice") and then',  # text after the call
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Nice"}',  # an unterminated JSON call
    "<|python_tag|>  \n",  # no code
    '<|python_tag|>print(1)<|python_tag|>print(2)',  # two tags
    'Let me look.<|python_tag|>brave_search.call(query="Nice")',  # text before the tag
]


def _hf(tokenizer: Any, template: str, tool_call_format: str) -> HFChatTemplateRenderer:
    return HFChatTemplateRenderer(tokenizer, chat_template=read_template(template), tool_call_format=tool_call_format)


FAMILIES = {  # name -> (tokenizer fixture, build, malformed replies)
    "llama3": ("llama3_tokenizer", lambda tok: get_renderer("llama3", tok), LLAMA3_MALFORMED),
    "llama3_1": ("llama3_tokenizer", lambda tok: get_renderer("llama3_1", tok), LLAMA3_MALFORMED + PYTHON_TAG_MALFORMED),
    "chatml": ("smollm2_tokenizer", lambda tok: get_renderer("chatml", tok), HERMES_MALFORMED),
    "smollm2": ("smollm2_tokenizer", lambda tok: get_renderer("smollm2", tok), HERMES_MALFORMED),
    "hf_chat_template/hermes": ("qwen3_tokenizer", lambda tok: _hf(tok, "qwen2.5.jinja", "hermes"), HERMES_MALFORMED),
    "hf_chat_template/llama3_json": (
        "llama3_tokenizer", lambda tok: _hf(tok, "llama3.1.jinja", "llama3_json"), LLAMA3_MALFORMED),
}
HERMES_FAMILIES = ["chatml", "smollm2", "hf_chat_template/hermes"]


@pytest.fixture(params=sorted(FAMILIES))
def family(request: pytest.FixtureRequest) -> tuple[str, Renderer]:
    fixture, build, _ = FAMILIES[request.param]
    return request.param, build(request.getfixturevalue(fixture))


def _sampled(renderer: Renderer, message: Message) -> list[int]:
    """The tokens a model emits for `message` after the generation prompt."""
    model_input, weights = renderer.build_supervised_example([QUESTION, message], TrainOnWhat.LAST_ASSISTANT_MESSAGE)
    return np.array(model_input.to_ints())[weights == 1].tolist()


def _trained_text(renderer: Renderer, messages: list[Message], train_on_what: TrainOnWhat) -> list[str]:
    """The trained stretches of the example, decoded, in order."""
    model_input, weights = renderer.build_supervised_example(messages, train_on_what)
    stretches: list[list[int]] = []
    previous = 0.0
    for token, weight in zip(model_input.to_ints(), weights.tolist(), strict=True):
        if weight and not previous:
            stretches.append([])
        if weight:
            stretches[-1].append(token)
        previous = weight
    return [renderer.decode(stretch) for stretch in stretches]


# --- every family: round trip, malformed calls -----------------------------------------------------


def test_a_rendered_call_parses_back_to_the_same_call(family: tuple[str, Renderer]) -> None:
    _, renderer = family
    message, ok = renderer.parse_response(_sampled(renderer, BARE_CALL))
    assert ok and message == BARE_CALL
    [parsed] = message["tool_calls"]
    assert parsed.function.name == "get_weather"
    assert json.loads(parsed.function.arguments) == {"city": "São Paulo"}


@pytest.mark.parametrize("name", HERMES_FAMILIES)
def test_hermes_families_parse_content_and_several_calls(name: str, request: pytest.FixtureRequest) -> None:
    fixture, build, _ = FAMILIES[name]
    renderer = build(request.getfixturevalue(fixture))
    assert renderer.parse_response(_sampled(renderer, TWO_CALLS)) == (TWO_CALLS, True)


def _stop_tokens(renderer: Renderer) -> list[int]:
    stops = renderer.get_stop_sequences()
    assert all(isinstance(stop, int) for stop in stops)
    return [int(stop) for stop in stops]


def test_a_malformed_call_is_not_ok_and_keeps_the_raw_text(family: tuple[str, Renderer]) -> None:
    """After each stop token (`llama3_1` has two)."""
    name, renderer = family
    for stop in _stop_tokens(renderer):
        for text in FAMILIES[name][2]:
            message, ok = renderer.parse_response(renderer.encode(text) + [stop])
            assert not ok, text
            assert message == {"role": "assistant", "content": text}, text


def test_text_without_a_call_is_content(family: tuple[str, Renderer]) -> None:
    """Including a JSON answer that does not open like a Llama-3 call."""
    _, renderer = family
    stop = _stop_tokens(renderer)[0]
    for text in ["It is sunny.", '{"answer": 4, "name": "x"}']:
        assert renderer.parse_response(renderer.encode(text) + [stop]) == (
            {"role": "assistant", "content": text},
            True,
        )


# --- Llama-3 ---------------------------------------------------------------------------------------


def _tool_conversation(renderer: Renderer, system_prompt: str = "") -> list[Message]:
    prefix = renderer.create_conversation_prefix_with_tools([WEATHER], system_prompt)
    return [*prefix, QUESTION, BARE_CALL, RESULT, ANSWER]


def _reference_conversation(system_prompt: str = "") -> list[dict[str, Any]]:
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "São Paulo"}}}
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, dict(QUESTION), {"role": "assistant", "content": "", "tool_calls": [call]}, dict(RESULT),
            dict(ANSWER)]


TOOLS = [{"type": "function", "function": dict(WEATHER)}]


@pytest.mark.parametrize("template", ["llama3.1.jinja", "llama3.2.jinja"])
def test_llama3_1_tool_conversation_equals_the_template(template: str, llama3_tokenizer: Any) -> None:
    """Declaration, call, result and answer; prompt before the answer and the whole conversation."""
    text = read_template(template)
    renderer = get_renderer("llama3_1", llama3_tokenizer)
    messages, reference = _tool_conversation(renderer, "Be brief."), _reference_conversation("Be brief.")
    expected = reference_tokens(llama3_tokenizer, text, reference, False, TOOLS, date_string="26 Jul 2024")
    assert renderer.build_supervised_example(messages, TrainOnWhat.ALL_TOKENS)[0].to_ints() == expected
    expected = reference_tokens(llama3_tokenizer, text, reference[:-1], True, TOOLS, date_string="26 Jul 2024")
    assert renderer.build_generation_prompt(messages[:-1]).to_ints() == expected


def test_llama3_equals_the_3_1_template_past_its_system_turn(llama3_tokenizer: Any) -> None:
    """`llama3` writes no dated system turn; everything after it is the template's."""
    renderer = get_renderer("llama3", llama3_tokenizer)
    template = read_template("llama3.1.jinja")
    messages, reference = _tool_conversation(renderer), _reference_conversation()
    for prefix, generation in [(messages, False), (messages[:-1], True)]:
        theirs = llama3_tokenizer.apply_chat_template(
            reference[: len(prefix) - 1], tools=TOOLS, chat_template=template, tokenize=False,
            add_generation_prompt=generation,
        )
        system_turn = theirs[: theirs.index("<|eot_id|>") + len("<|eot_id|>")].removeprefix("<|begin_of_text|>")
        assert "Environment: ipython" in system_turn
        expected = renderer.encode(theirs.replace(system_turn, "", 1))
        ours = (renderer.build_generation_prompt(prefix) if generation
                else renderer.build_supervised_example(prefix, TrainOnWhat.ALL_TOKENS)[0])
        assert ours.to_ints() == expected


def test_llama3_trains_the_call_and_the_answer_not_the_result(llama3_tokenizer: Any) -> None:
    renderer = get_renderer("llama3_1", llama3_tokenizer)
    messages = _tool_conversation(renderer)
    assert _trained_text(renderer, messages, TrainOnWhat.ALL_ASSISTANT_MESSAGES) == [
        '{"name": "get_weather", "parameters": {"city": "São Paulo"}}<|eot_id|>',
        "It is 21 °C.<|eot_id|>",
    ]
    [user_turn] = _trained_text(renderer, messages, TrainOnWhat.ALL_USER_AND_SYSTEM_MESSAGES)  # one shared turn
    assert user_turn.startswith("Given the following functions") and user_turn.endswith("\n\nWeather in São Paulo?<|eot_id|>")


def test_llama3_refuses_what_its_format_cannot_hold(llama3_tokenizer: Any) -> None:
    renderer = get_renderer("llama3", llama3_tokenizer)
    with pytest.raises(RendererError, match="Message 1 has 2 tool calls; .*one call per assistant message"):
        renderer.build_generation_prompt([QUESTION, {**TWO_CALLS, "content": ""}])
    with pytest.raises(RendererError, match="Message 1 has content beside its tool call"):
        renderer.build_generation_prompt([QUESTION, {**BARE_CALL, "content": "Checking."}])


def test_llama3_1_keeps_its_date_when_pickled(llama3_tokenizer: Any) -> None:
    renderer = get_renderer("llama3_1", llama3_tokenizer)
    assert "Today Date: 26 Jul 2024\n" in renderer.decode(renderer.build_generation_prompt([QUESTION]).to_ints())
    dated = pickle.loads(pickle.dumps(Llama31Renderer(llama3_tokenizer, date_string="01 Jan 2025")))
    assert "Today Date: 01 Jan 2025\n" in dated.decode(dated.build_generation_prompt([QUESTION]).to_ints())


# --- Llama-3.1 built-in tools: <|python_tag|> ... <|eom_id|> ---------------------------------------

BUILTINS = ("brave_search", "wolfram_alpha")
SEARCH_CALL: Message = {"role": "assistant", "content": "",
                        "tool_calls": [ToolCall.of("brave_search", {"query": "weather in Nice"})]}
CODE = "import math\nprint(math.sqrt(2))"
CODE_CALL: Message = {"role": "assistant", "content": "", "tool_calls": [ToolCall.of("ipython", {"code": CODE})]}


def _builtin_reference(call: dict[str, Any], system_prompt: str = "") -> list[dict[str, Any]]:
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, dict(QUESTION), {"role": "assistant", "content": "", "tool_calls": [call]}, dict(RESULT),
            dict(ANSWER)]


@pytest.mark.parametrize("custom_tools", [False, True], ids=["builtin_only", "with_custom_tools"])
def test_llama3_1_builtin_tool_calls_equal_the_template(custom_tools: bool, llama3_tokenizer: Any) -> None:
    """The template's `builtin_tools`: the system turn names them, a call to one is written after
    `<|python_tag|>`, and every call turn (a JSON call too) ends with `<|eom_id|>`."""
    template = read_template("llama3.1.jinja")
    renderer = Llama31Renderer(llama3_tokenizer, builtin_tools=BUILTINS)
    offered = [WEATHER, {"name": "brave_search", "description": "Search the web.", "parameters": {}}]
    prefix = renderer.create_conversation_prefix_with_tools(offered if custom_tools else offered[1:], "Be brief.")
    tools = TOOLS if custom_tools else None
    for message, call in [(SEARCH_CALL, {"name": "brave_search", "arguments": {"query": "weather in Nice"}}),
                          (BARE_CALL, {"name": "get_weather", "arguments": {"city": "São Paulo"}})]:
        messages = [*prefix, QUESTION, message, RESULT, ANSWER]
        reference = _builtin_reference({"type": "function", "function": call}, "Be brief.")
        expected = reference_tokens(llama3_tokenizer, template, reference, False, tools, builtin_tools=list(BUILTINS),
                                    date_string="26 Jul 2024")
        assert renderer.build_supervised_example(messages, TrainOnWhat.ALL_TOKENS)[0].to_ints() == expected
        expected = reference_tokens(llama3_tokenizer, template, reference[:-1], True, tools,
                                    builtin_tools=list(BUILTINS), date_string="26 Jul 2024")
        assert renderer.build_generation_prompt(messages[:-1]).to_ints() == expected
    text = renderer.decode(renderer.build_generation_prompt([*prefix, QUESTION]).to_ints())
    assert "Environment: ipython\nTools: brave_search, wolfram_alpha\n\n" in text
    assert ('"name": "brave_search"' in text) is False and ('"name": "get_weather"' in text) is custom_tools


@pytest.mark.parametrize("message", [SEARCH_CALL, CODE_CALL, BARE_CALL], ids=["brave_search", "ipython", "json"])
def test_llama3_1_builtin_calls_round_trip(message: Message, llama3_tokenizer: Any) -> None:
    """Rendered (ending with <|eom_id|>), sampled and parsed back to the same call. The template cannot
    write a code-interpreter call (`<|python_tag|>` + code), so that one is checked against Meta's
    documented form instead."""
    renderer = Llama31Renderer(llama3_tokenizer, builtin_tools=BUILTINS)
    sampled = _sampled(renderer, message)
    assert sampled[-1] == llama3_tokenizer.convert_tokens_to_ids("<|eom_id|>")
    assert renderer.parse_response(sampled) == (message, True)
    if message is CODE_CALL:
        assert renderer.decode(sampled) == f"<|python_tag|>{CODE}<|eom_id|>"
        plain = get_renderer("llama3_1", llama3_tokenizer)  # no built-in tools: the same code call
        assert _sampled(plain, message) == sampled


@pytest.mark.parametrize(("text", "name", "arguments"), [
    ('brave_search.call(query="weather in Nice")', "brave_search", {"query": "weather in Nice"}),
    ('wolfram_alpha.call(query="2+2", units = "metric" )', "wolfram_alpha", {"query": "2+2", "units": "metric"}),
    ("photogen.call()", "photogen", {}),
    ('{"name": "get_weather", "parameters": {"city": "Nice"}}', "get_weather", {"city": "Nice"}),
    ("print(1 + 1)", "ipython", {"code": "print(1 + 1)"}),
    ("\nx = 'call(' \nprint(x)\n", "ipython", {"code": "\nx = 'call(' \nprint(x)\n"}),
], ids=["brave_search", "two_arguments", "no_arguments", "json", "code", "code_kept_verbatim"])
def test_llama3_1_parses_a_python_tag_reply_into_one_call(
    text: str, name: str, arguments: dict[str, str], llama3_tokenizer: Any
) -> None:
    """After either stop token: a reply that opens with `<|python_tag|>` is a call."""
    renderer = get_renderer("llama3_1", llama3_tokenizer)
    for stop in ("<|eom_id|>", "<|eot_id|>"):
        message, ok = renderer.parse_response(renderer.encode(f"<|python_tag|>{text}{stop}"))
        assert ok and message["content"] == ""
        [call] = message["tool_calls"]
        assert call.function.name == name and json.loads(call.function.arguments) == arguments


def test_llama3_1_stops_at_the_end_of_a_message_too(llama3_tokenizer: Any) -> None:
    """`<|eom_id|>` (128008) ends a built-in call; `llama3`, for Llama-3.0 too, has only `<|eot_id|>`."""
    assert get_renderer("llama3_1", llama3_tokenizer).get_stop_sequences() == [128009, 128008]
    assert get_renderer("llama3", llama3_tokenizer).get_stop_sequences() == [128009]
    renderer = get_renderer("llama3_1", llama3_tokenizer)
    cut = renderer.encode('<|python_tag|>brave_search.call(query="Nice")')  # no stop token: truncated
    assert renderer.parse_response(cut) == (
        {"role": "assistant", "content": '<|python_tag|>brave_search.call(query="Nice")'}, False)


def test_llama3_1_refuses_builtin_calls_it_cannot_write(llama3_tokenizer: Any) -> None:
    renderer = Llama31Renderer(llama3_tokenizer, builtin_tools=BUILTINS)
    quoted = {**SEARCH_CALL, "tool_calls": [ToolCall.of("brave_search", {"query": 'say "hi"'})]}
    with pytest.raises(RendererError, match='Message 1 calls the built-in tool .brave_search.* without a \'"\''):
        renderer.build_generation_prompt([QUESTION, quoted])
    numeric = {**SEARCH_CALL, "tool_calls": [ToolCall.of("wolfram_alpha", {"query": 4})]}
    with pytest.raises(RendererError, match="every value must be text"):
        renderer.build_generation_prompt([QUESTION, numeric])
    no_code = {**CODE_CALL, "tool_calls": [ToolCall.of("ipython", {"source": "print(1)"})]}
    with pytest.raises(RendererError, match="Message 1 calls 'ipython', the code interpreter"):
        renderer.build_generation_prompt([QUESTION, no_code])


def test_llama3_1_keeps_its_builtin_tools_when_pickled(llama3_tokenizer: Any) -> None:
    renderer = pickle.loads(pickle.dumps(Llama31Renderer(llama3_tokenizer, builtin_tools=BUILTINS)))
    assert renderer.builtin_tools == BUILTINS
    assert "Tools: brave_search, wolfram_alpha\n" in renderer.decode(renderer.build_generation_prompt([QUESTION]).to_ints())


# --- hf_chat_template ------------------------------------------------------------------------------


@pytest.mark.parametrize("system_prompt", ["", "Be brief."])
def test_hf_chat_template_declares_tools_as_the_qwen2_5_template(system_prompt: str, qwen3_tokenizer: Any) -> None:
    """Declaration + call + result + answer equal the template given `tools=`, and `chatml` (whose
    format is Qwen2.5's) with the same system prompt."""
    template = read_template("qwen2.5.jinja")
    renderer = HFChatTemplateRenderer(qwen3_tokenizer, chat_template=template, tool_call_format="hermes")
    messages, reference = _tool_conversation(renderer, system_prompt), _reference_conversation(system_prompt)
    expected = reference_tokens(qwen3_tokenizer, template, reference, False, TOOLS)
    assert renderer.build_supervised_example(messages, TrainOnWhat.ALL_TOKENS)[0].to_ints() == expected
    expected_prompt = reference_tokens(qwen3_tokenizer, template, reference[:-1], True, TOOLS)
    assert renderer.build_generation_prompt(messages[:-1]).to_ints() == expected_prompt
    chatml = get_renderer("chatml", qwen3_tokenizer)
    default = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    chatml_messages = _tool_conversation(chatml, system_prompt or default)
    assert chatml.build_supervised_example(chatml_messages, TrainOnWhat.ALL_TOKENS)[0].to_ints() == expected


def test_hf_chat_template_refuses_to_declare_tools_it_cannot_place(
    llama3_tokenizer: Any, smollm2_tokenizer: Any
) -> None:
    llama = _hf(llama3_tokenizer, "llama3.1.jinja", "llama3_json")
    assert llama.renders_tool_calls and not llama.declares_tools and not llama.supports_tool_calls
    with pytest.raises(RendererError, match="first user turn.*'llama3_1'"):
        llama.create_conversation_prefix_with_tools([WEATHER])
    smollm2 = HFChatTemplateRenderer(smollm2_tokenizer, tool_call_format="hermes")  # its template ignores tools
    assert not smollm2.declares_tools and not smollm2.supports_tool_calls
    with pytest.raises(RendererError, match="does not declare tools"):
        smollm2.create_conversation_prefix_with_tools([WEATHER])


def test_hf_chat_template_parses_calls_only_in_the_named_format(qwen3_tokenizer: Any) -> None:
    template = read_template("qwen2.5.jinja")
    plain = HFChatTemplateRenderer(qwen3_tokenizer, chat_template=template)
    assert plain.tool_call_format == ToolCallFormat.NONE and not plain.supports_tool_calls
    sampled = _sampled(plain, BARE_CALL)
    text = plain.decode(sampled).removesuffix("<|im_end|>")
    assert plain.parse_response(sampled) == ({"role": "assistant", "content": text}, True)
    hermes = HFChatTemplateRenderer(qwen3_tokenizer, chat_template=template, tool_call_format="hermes")
    assert hermes.supports_tool_calls
    assert pickle.loads(pickle.dumps(hermes)).tool_call_format == ToolCallFormat.HERMES
    with pytest.raises(ConfigurationError, match=r"Unknown tool_call_format 'json'.*'hermes', 'llama3_json'"):
        HFChatTemplateRenderer(qwen3_tokenizer, chat_template=template, tool_call_format="json")


def test_which_renderers_support_tool_calls(llama3_tokenizer: Any, smollm2_tokenizer: Any) -> None:
    supported = {name: get_renderer(name, tokenizer).supports_tool_calls for name, tokenizer in [
        ("llama3", llama3_tokenizer), ("llama3_1", llama3_tokenizer), ("chatml", smollm2_tokenizer),
        ("smollm2", smollm2_tokenizer), ("role_colon", smollm2_tokenizer), ("hf_chat_template", smollm2_tokenizer),
    ]}
    assert supported == {"llama3": True, "llama3_1": True, "chatml": True, "smollm2": True, "role_colon": False,
                         "hf_chat_template": False}
