"""`hf_chat_template` equals the hand-written renderers where both apply, and trains a new family.

The hand-written renderers are token-exact with their templates (test_conformance.py), so rendering
the same templates through `hf_chat_template` must give the same generation prompts, supervised
tokens, weights and stop tokens. Where the two legitimately part ways, the comparison says so:

- `hf_chat_template` refuses (RendererError) a trained message it cannot locate without guessing,
  where the hand-written renderers decide by design: Qwen3 renders an earlier assistant turn
  without the think block it had when it was last; a SmolLM2 content that starts with whitespace
  merges with the header's newline into one token (the hand-written renderers train that token);
  Qwen3 treats a user turn that wraps a `<tool_response>` as no query, so the text before it
  changes when its content is replaced by a probe. Each comparison counts only conversations both
  accept, requires at least 50 (Llama-3: no refusal at all), and checks that every refusal is such
  a "cannot tell" RendererError and not another failure;
- Qwen3 tool messages: the hand-written renderer trains the `<tool_response>` wrapper as part of
  the message's output, `hf_chat_template` trains from the content on, so there its weights must be
  a subset of the hand-written ones (tokens still equal).

Then a model of a family with no hand-written renderer (a tiny random Gemma-architecture model,
with a chat template written here) gets `hf_chat_template` from `get_recommended_renderer_name`
and trains through it on the local engine.
"""

import pickle
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinker import types

from recipes_lib.exceptions import ConfigurationError, DataFormatError, RendererError
from recipes_lib.model_info import get_recommended_renderer_name
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, Renderer, ToolCall, TrainOnWhat, get_renderer
from renderers.hf_chat_template import HFChatTemplateRenderer
from supervised.datums import conversation_to_datum
from tests.renderers.conversation_corpus import Case, chat_corpus, qwen_corpus
from tests.renderers.template_reference import read_template

MIN_COMPARED = 50
ENOUGH_COMPARED = 60  # a comparison stops here, to keep the file fast
REFUSALS = ("Cannot tell which tokens are message", "Cannot tell where message")


@dataclass
class Pair:
    """A hand-written renderer, `hf_chat_template` over the same template, and their corpus."""

    hand: Renderer
    hf: HFChatTemplateRenderer
    cases: list[Case]
    may_refuse: bool = True
    tool_outputs_differ: bool = False
    hand_refusals: list[str] = field(default_factory=list)

    def messages(self, case: Case) -> list[Message]:
        if case.tools is None:
            return case.renderer_messages()
        prefix = self.hand.create_conversation_prefix_with_tools(case.tools, case.system_prompt or "")
        return case.renderer_messages(tools_prefix=prefix)


def _smollm2(tokenizer: Any) -> Pair:
    return Pair(
        get_renderer("smollm2", tokenizer), HFChatTemplateRenderer(tokenizer), chat_corpus(seed=40, count=160)
    )


def _chatml(tokenizer: Any) -> Pair:
    """Plain ChatML equals SmolLM2's template when a system prompt is given."""
    cases = [case for case in chat_corpus(seed=41, count=320) if case.system_prompt is not None][:160]
    return Pair(get_renderer("chatml", tokenizer), HFChatTemplateRenderer(tokenizer), cases)


def _llama3(tokenizer: Any) -> Pair:
    """Llama-3 trims contents, so no boundary ever merges: nothing may be refused."""
    hf = HFChatTemplateRenderer(tokenizer, chat_template=read_template("llama3.jinja"))
    return Pair(get_renderer("llama3", tokenizer), hf, chat_corpus(seed=42, count=140), may_refuse=False)


def _qwen3(tokenizer: Any) -> Pair:
    hf = HFChatTemplateRenderer(tokenizer, chat_template=read_template("qwen3.jinja"))
    cases = qwen_corpus(seed=43, count=300)
    return Pair(get_renderer("qwen3", tokenizer), hf, cases, tool_outputs_differ=True)


def _qwen3_disable_thinking(tokenizer: Any) -> Pair:
    """The template's `enable_thinking=False`; the hand-written renderer refuses trained reasoning."""
    hf = HFChatTemplateRenderer(
        tokenizer, chat_template=read_template("qwen3.jinja"), template_kwargs={"enable_thinking": False}
    )
    hand = get_renderer("qwen3_disable_thinking", tokenizer)
    return Pair(hand, hf, qwen_corpus(seed=44, count=300), tool_outputs_differ=True)


PAIRS: dict[str, tuple[str, Callable[[Any], Pair]]] = {
    "smollm2": ("smollm2_tokenizer", _smollm2),
    "chatml": ("smollm2_tokenizer", _chatml),
    "llama3": ("llama3_tokenizer", _llama3),
    "qwen3": ("qwen3_tokenizer", _qwen3),
    "qwen3_disable_thinking": ("qwen3_tokenizer", _qwen3_disable_thinking),
}


@pytest.fixture(scope="module", params=sorted(PAIRS))
def pair(request: pytest.FixtureRequest) -> Pair:
    fixture, build = PAIRS[request.param]
    return build(request.getfixturevalue(fixture))


def _with_flags(messages: list[Message], seed: int) -> list[Message]:
    rng = random.Random(seed)
    flagged = []
    for message in messages:
        copy = message.copy()
        copy["trainable"] = rng.random() < 0.5
        flagged.append(copy)
    return flagged


def test_generation_prompts_and_stop_tokens_equal(pair: Pair) -> None:
    assert len(pair.cases) >= MIN_COMPARED
    for index, case in enumerate(pair.cases):
        messages = pair.messages(case)
        ours, theirs = pair.hf.build_generation_prompt(messages), pair.hand.build_generation_prompt(messages)
        assert ours.to_ints() == theirs.to_ints(), f"conversation {index}"
    assert pair.hf.get_stop_sequences() == pair.hand.get_stop_sequences()


@pytest.mark.parametrize("train_on_what", list(TrainOnWhat))
def test_supervised_examples_equal_where_both_apply(pair: Pair, train_on_what: TrainOnWhat) -> None:
    compared, refused = 0, []
    for index, case in enumerate(pair.cases):
        if compared == ENOUGH_COMPARED:
            break
        messages = pair.messages(case)
        if train_on_what == TrainOnWhat.CUSTOMIZED:
            messages = _with_flags(messages, seed=index)
        if train_on_what == TrainOnWhat.LAST_ASSISTANT_MESSAGE and messages[-1]["role"] != "assistant":
            continue  # a prompt without an answer is not a training example
        try:
            expected_tokens, expected_weights = pair.hand.build_supervised_example(messages, train_on_what)
        except RendererError:  # qwen3_disable_thinking refuses to train a turn that reasoned
            continue
        try:
            tokens, weights = pair.hf.build_supervised_example(messages, train_on_what)
        except RendererError as error:
            refused.append(str(error))
            continue
        compared += 1
        where = f"conversation {index}, {[m['role'] for m in messages]}"
        assert tokens.to_ints() == expected_tokens.to_ints(), where
        assert weights.dtype == np.float32 and weights.shape == expected_weights.shape
        trains_tool = any(
            m["role"] == "tool" and train_on_what in (TrainOnWhat.ALL_MESSAGES, TrainOnWhat.CUSTOMIZED)
            for m in messages
        )
        if pair.tool_outputs_differ and trains_tool:
            assert np.all(weights <= expected_weights), where
        else:
            assert weights.tolist() == expected_weights.tolist(), where
    assert compared >= MIN_COMPARED, f"only {compared} compared; {len(refused)} refused"
    assert all(error.startswith(REFUSALS) for error in refused), refused[:3]
    if not pair.may_refuse or train_on_what == TrainOnWhat.ALL_TOKENS:
        assert refused == []


# --- locating messages, by hand ------------------------------------------------------------------

CHAT: list[Message] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Goodbye"},
]


def _trained_text(renderer: Renderer, messages: list[Message], train_on_what: TrainOnWhat) -> list[str]:
    """The trained stretches of the example, decoded, in order."""
    model_input, weights = renderer.build_supervised_example(messages, train_on_what)
    tokens, stretches, current = model_input.to_ints(), [], []
    for token, weight in zip(tokens, weights.tolist(), strict=True):
        if weight:
            current.append(token)
        elif current:
            stretches.append(renderer.decode(current))
            current = []
    return stretches + ([renderer.decode(current)] if current else [])


@pytest.mark.parametrize(
    ("train_on_what", "expected"),
    [
        (TrainOnWhat.LAST_ASSISTANT_MESSAGE, ["<think>\n\n</think>\n\nGoodbye<|im_end|>"]),
        (TrainOnWhat.ALL_USER_AND_SYSTEM_MESSAGES, ["Be brief.<|im_end|>", "Hi<|im_end|>", "Bye<|im_end|>"]),
    ],
)
def test_qwen3_outputs_by_hand(qwen3_tokenizer: Any, train_on_what: TrainOnWhat, expected: list[str]) -> None:
    """The last turn's empty think block is the model's output: its generation prompt ends before it."""
    renderer = HFChatTemplateRenderer(qwen3_tokenizer, chat_template=read_template("qwen3.jinja"))
    assert _trained_text(renderer, CHAT, train_on_what) == expected


def test_qwen3_historical_turn_is_refused_not_guessed(qwen3_tokenizer: Any) -> None:
    """As the last message, turn 2 has an empty think block; once a user follows, it has none."""
    renderer = HFChatTemplateRenderer(qwen3_tokenizer, chat_template=read_template("qwen3.jinja"))
    with pytest.raises(RendererError, match="message 2's.*'<think>\\\\n\\\\n</think>") as error:
        renderer.build_supervised_example(CHAT, TrainOnWhat.ALL_ASSISTANT_MESSAGES)
    assert "last_assistant_message" in str(error.value)


def test_qwen3_disable_thinking_keeps_the_empty_think_block_in_the_prompt(qwen3_tokenizer: Any) -> None:
    renderer = HFChatTemplateRenderer(
        qwen3_tokenizer,
        chat_template=read_template("qwen3.jinja"),
        template_kwargs={"enable_thinking": False},
    )
    assert _trained_text(renderer, CHAT[:3], TrainOnWhat.LAST_ASSISTANT_MESSAGE) == ["Hello<|im_end|>"]
    prompt = renderer.decode(renderer.build_generation_prompt(CHAT[:2]).to_ints())
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen3_reasoning_and_tool_calls_reach_the_template(qwen3_tokenizer: Any) -> None:
    renderer = HFChatTemplateRenderer(qwen3_tokenizer, chat_template=read_template("qwen3.jinja"))
    assert renderer.reasoning_field == "reasoning_content" and renderer.renders_tool_calls
    answer: Message = {
        "role": "assistant",
        "content": "Checking.",
        "thinking": "Need the weather.",
        "tool_calls": [ToolCall.of("get_weather", {"city": "Paris"})],
    }
    assert _trained_text(renderer, [CHAT[1], answer], TrainOnWhat.LAST_ASSISTANT_MESSAGE) == [
        "<think>\nNeed the weather.\n</think>\n\nChecking.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    ]


def test_a_content_merging_with_its_header_is_refused(smollm2_tokenizer: Any) -> None:
    """`assistant\\n` + `  Hello` tokenizes `\\n ` as one token, so the prompt is not a token prefix."""
    renderer = HFChatTemplateRenderer(smollm2_tokenizer)
    messages: list[Message] = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "  Hello"}]
    with pytest.raises(RendererError, match="message 1's: .*generation prompt"):
        renderer.build_supervised_example(messages)
    _, weights = renderer.build_supervised_example(messages, TrainOnWhat.ALL_USER_AND_SYSTEM_MESSAGES)
    assert weights.sum() > 0


def test_parse_response_splits_at_the_stop_token(llama3_tokenizer: Any) -> None:
    renderer = HFChatTemplateRenderer(llama3_tokenizer, chat_template=read_template("llama3.jinja"))
    [eot] = renderer.get_stop_sequences()
    assert eot == llama3_tokenizer.convert_tokens_to_ids("<|eot_id|>")
    text = renderer.encode("Hi there")
    assert renderer.parse_response(text + [eot] + renderer.encode("junk")) == (
        {"role": "assistant", "content": "Hi there"},
        True,
    )
    assert renderer.parse_response(text) == ({"role": "assistant", "content": "Hi there"}, False)


def test_unsupported_inputs_are_refused(smollm2_tokenizer: Any) -> None:
    renderer = HFChatTemplateRenderer(smollm2_tokenizer)
    assert renderer.reasoning_field is None and not renderer.renders_tool_calls
    with pytest.raises(RendererError, match="Message 1 has thinking"):
        renderer.build_generation_prompt([CHAT[1], {"role": "assistant", "content": "x", "thinking": "y"}])
    call: Message = {"role": "assistant", "content": "", "tool_calls": [ToolCall.of("f", {})]}
    with pytest.raises(RendererError, match="Message 1 has tool_calls"):
        renderer.build_generation_prompt([CHAT[1], call])
    with pytest.raises(RendererError, match="only assistant turns"):
        renderer.build_generation_prompt(CHAT[:2], role="user")
    with pytest.raises(RendererError, match="Message 0 is an assistant message"):
        renderer.build_supervised_example([{"role": "assistant", "content": "x"}])


def test_templates_it_cannot_use_are_refused(smollm2_tokenizer: Any) -> None:
    no_stop = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    with pytest.raises(RendererError, match="writes no special token after an assistant message"):
        HFChatTemplateRenderer(smollm2_tokenizer, chat_template=no_stop)
    strict = "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}{{ m['content'] }}<|im_end|>{% endfor %}"
    with pytest.raises(DataFormatError, match="refused the conversation: no system"):
        HFChatTemplateRenderer(smollm2_tokenizer, chat_template=strict).build_generation_prompt(CHAT)
    with pytest.raises(RendererError, match="has no chat template"):
        HFChatTemplateRenderer(get_tokenizer("Qwen/Qwen3-8B"))


# --- a family with no hand-written renderer -----------------------------------------------------

# A Gemma-like layout in this project's own words: the assistant speaks as "model", contents are trimmed.
TURN_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|turn|>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ message['content'] | trim }}<|end_turn|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|turn|>model\n{% endif %}"
)
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<|turn|>", "<|end_turn|>"]
QUESTION: list[Message] = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
]


def _save_tokenizer(folder: Path, chat_template: str | None) -> Any:
    """A byte-level BPE tokenizer trained on a few sentences, with this family's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(
        ["What is the capital of France? Paris.", "Answer in one word. model user"], trainer
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>"
    )
    tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(str(folder))
    return tokenizer


@pytest.fixture(scope="module")
def turn_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A tiny random Gemma-architecture model whose tokenizer carries TURN_TEMPLATE; its folder is its name."""
    import torch
    from transformers import AutoModelForCausalLM, GemmaConfig

    folder = tmp_path_factory.mktemp("models") / "tiny-turn-model"
    tokenizer = _save_tokenizer(folder, TURN_TEMPLATE)
    config = GemmaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained(str(folder))
    yield str(folder)


def test_an_unknown_family_with_a_template_gets_hf_chat_template(turn_model: str, tmp_path: Path) -> None:
    assert get_recommended_renderer_name(turn_model) == "hf_chat_template"
    renderer = get_renderer("hf_chat_template", get_tokenizer(turn_model))
    assert renderer.get_stop_sequences() == [renderer.encode("<|end_turn|>")[0]]
    assert renderer.decode(renderer.build_generation_prompt(QUESTION[:2]).to_ints()) == (
        "<bos><|turn|>system\nAnswer in one word.<|end_turn|>\n"
        "<|turn|>user\nWhat is the capital of France?<|end_turn|>\n<|turn|>model\n"
    )
    assert _trained_text(renderer, QUESTION, TrainOnWhat.LAST_ASSISTANT_MESSAGE) == ["Paris.<|end_turn|>"]
    assert _trained_text(renderer, QUESTION, TrainOnWhat.ALL_MESSAGES) == [
        "Answer in one word.<|end_turn|>",
        "What is the capital of France?<|end_turn|>",
        "Paris.<|end_turn|>",
    ]
    spans = renderer.render_spans(QUESTION)
    assert "".join(span.text for span in spans) == renderer.decode(
        renderer.build_supervised_example(QUESTION)[0].to_ints()
    )
    assert [span.text for span in spans if span.is_output] == _trained_text(
        renderer, QUESTION, TrainOnWhat.ALL_MESSAGES
    )
    assert renderer.generation_suffix("assistant") == "<|turn|>model\n"
    restored = pickle.loads(pickle.dumps(renderer))  # rebuilt from the folder name
    assert restored.build_generation_prompt(QUESTION[:2]) == renderer.build_generation_prompt(QUESTION[:2])

    bare = tmp_path / "no-template"
    _save_tokenizer(bare, chat_template=None)
    with pytest.raises(ConfigurationError, match="Unknown model"):
        get_recommended_renderer_name(str(bare))


def test_an_unknown_family_trains_through_its_template(turn_model: str, service_client: Any) -> None:
    renderer = get_renderer(get_recommended_renderer_name(turn_model), get_tokenizer(turn_model))
    datum = conversation_to_datum(QUESTION, renderer, None, TrainOnWhat.LAST_ASSISTANT_MESSAGE)
    assert datum.loss_fn_inputs["weights"].to_numpy().sum() == len(renderer.encode("Paris.<|end_turn|>"))
    client = service_client.create_lora_training_client(turn_model, rank=4, seed=0)
    losses = []
    for _ in range(8):
        losses.append(client.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"])
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = client.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    assert after < 0.3 * losses[0], (losses, after)  # seen: 22.8 -> 4.3
