"""The Inspect bridge: message conversion, sampling settings, generate() over a scripted client, and
Inspect evals (including model_graded_qa with our model as the grader) on scripted and tiny models."""

import asyncio
import re

import pytest
from inspect_ai import Task, eval_async
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageTool,
    ChatMessageUser,
    ContentImage,
    ContentText,
    GenerateConfig,
    Model,
    get_model,
)
from inspect_ai.scorer import includes, model_graded_qa
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolCall as InspectToolCall
from inspect_ai.tool import ToolFunction, ToolInfo, tool

from eval.inspect_bridge import (
    InspectAPIFromTinkerSampling,
    offered_tools,
    sampling_params,
    to_inspect_tool_call,
    to_renderer_messages,
    token_usage,
    truncate_at_stop,
)
from eval.tasks import resolve_tasks
from recipes_lib.exceptions import DataFormatError, RendererError
from recipes_lib.tokenizers import get_tokenizer
from renderers import ToolCall, get_renderer
from tests.eval.fakes import TINY, ScriptedSamplingClient


def _model(client: ScriptedSamplingClient, **config: object) -> Model:
    api = InspectAPIFromTinkerSampling(renderer_name="smollm2", model_name=TINY, sampling_client=client)
    return Model(api=api, config=GenerateConfig(**config))  # type: ignore[arg-type]


def _add(question: str) -> str:
    a, b = map(int, re.findall(r"\d+", question)[:2])
    return str(a + b)


# -- pure conversions -------------------------------------------------------------------------------


def test_messages_keep_roles_text_tool_calls_and_tool_results() -> None:
    call = InspectToolCall(id="c1", function="add", arguments={"a": 1, "b": 2})
    messages = to_renderer_messages([
        ChatMessageUser(content=[ContentText(text="first"), ContentText(text="second")]),
        ChatMessageAssistant(content="", tool_calls=[call]),
        ChatMessageTool(content="3", tool_call_id="c1", function="add"),
    ], system_message="Be brief.")
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert messages[1] == {"role": "user", "content": "first\nsecond"}
    assert messages[2]["tool_calls"] == [ToolCall.of("add", '{"a": 1, "b": 2}', id="c1")]
    assert messages[3] == {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"}


def test_images_are_refused_with_the_message_index() -> None:
    with pytest.raises(DataFormatError, match="Message 1 holds .*image"):
        to_renderer_messages([ChatMessageUser(content="hi"),
                              ChatMessageUser(content=[ContentImage(image="data:image/png;base64,AAAA")])])


def test_sampling_params_follow_generate_config_with_documented_defaults() -> None:
    config = GenerateConfig(temperature=0.3, max_tokens=7, top_p=0.9, top_k=5, seed=11)
    params = sampling_params(config, [2], default_max_tokens=99)
    assert (params.temperature, params.max_tokens, params.top_p, params.top_k, params.seed, params.stop) == (
        0.3, 7, 0.9, 5, 11, [2])
    defaults = sampling_params(GenerateConfig(), ["\n\nUser:"], default_max_tokens=99)
    assert (defaults.temperature, defaults.max_tokens, defaults.top_p, defaults.top_k, defaults.seed) == (
        1.0, 99, 1.0, -1, None)
    # Inspect's stop strings join string stops; with token-id stops they are applied to the text.
    assert sampling_params(GenerateConfig(stop_seqs=["END"]), ["\n\nUser:"], 9).stop == ["\n\nUser:", "END"]
    assert sampling_params(GenerateConfig(stop_seqs=["END"]), [2], 9).stop == [2]
    assert truncate_at_stop("one END two STOP", ["STOP", "END"]) == "one "


def test_tools_offered_follow_tool_choice() -> None:
    tools = [ToolInfo(name="add", description="Add."), ToolInfo(name="mul", description="Multiply.")]
    assert [t["name"] for t in offered_tools(tools, "auto")] == ["add", "mul"]
    assert offered_tools(tools, "none") == []
    assert [t["name"] for t in offered_tools(tools, ToolFunction(name="mul"))] == ["mul"]


def test_tool_calls_become_inspect_calls_with_parse_errors_kept() -> None:
    ok = to_inspect_tool_call(ToolCall.of("add", '{"a": 1}', id=None), 0)
    assert (ok.id, ok.function, ok.arguments, ok.parse_error) == ("call_0", "add", {"a": 1}, None)
    bad = to_inspect_tool_call(ToolCall.of("add", "{oops", id="x"), 1)
    assert bad.parse_error is not None and bad.arguments == {}


def test_usage_counts_the_shared_prompt_once() -> None:
    usage = token_usage(10, [3, 4])
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (10, 7, 17)


# -- generate() over a scripted client --------------------------------------------------------------


def test_generate_renders_samples_with_the_renderers_stops_and_parses() -> None:
    client = ScriptedSamplingClient(lambda q: "Paris")
    model = _model(client, temperature=0.0, max_tokens=5, num_choices=3, seed=4, logprobs=True)
    output = asyncio.run(model.generate("What is the capital of France?"))
    renderer = get_renderer("smollm2", get_tokenizer(TINY))
    expected_prompt = renderer.build_generation_prompt([{"role": "user", "content": "What is the capital of France?"}])
    (prompt, num_samples, params), = client.requests
    assert prompt == expected_prompt.to_ints()
    assert (num_samples, params.temperature, params.max_tokens, params.seed) == (3, 0.0, 5, 4)
    assert params.stop == renderer.get_stop_sequences()
    assert [c.message.text for c in output.choices] == ["Paris"] * 3
    assert all(c.stop_reason == "stop" for c in output.choices)
    sampled = len(client.tokenizer.encode("Paris<|im_end|>", add_special_tokens=False))
    assert output.usage is not None
    assert (output.usage.input_tokens, output.usage.output_tokens) == (len(prompt), 3 * sampled)
    assert output.choices[0].logprobs is not None
    assert [lp.logprob for lp in output.choices[0].logprobs.content] == [-0.25] * sampled


def test_truncated_samples_report_max_tokens() -> None:
    output = asyncio.run(_model(ScriptedSamplingClient(lambda q: "a long", truncate=True)).generate("hi"))
    assert output.choices[0].stop_reason == "max_tokens"
    assert output.completion == "a long"


def test_tools_with_a_renderer_without_tool_support_are_refused() -> None:
    api = InspectAPIFromTinkerSampling(renderer_name="role_colon", model_name=TINY,
                                       sampling_client=ScriptedSamplingClient(lambda q: "x"))
    model = Model(api=api, config=GenerateConfig())
    with pytest.raises(RendererError, match="cannot render tool calls"):
        asyncio.run(model.generate("hi", tools=[ToolInfo(name="add", description="Add.")]))


def test_base_model_and_renderer_default_from_the_client() -> None:
    api = InspectAPIFromTinkerSampling(sampling_client=ScriptedSamplingClient(lambda q: "x"))
    assert (api.model_name, api.renderer.name) == (TINY, "smollm2")
    with pytest.raises(RendererError, match="does not match"):
        InspectAPIFromTinkerSampling(renderer_name="llama3", sampling_client=ScriptedSamplingClient(lambda q: "x"))


# -- whole Inspect evaluations -------------------------------------------------------------------------


def _accuracy(log: object, scorer: str | None = None) -> float:
    scores = log.results.scores  # type: ignore[attr-defined]
    score = next(s for s in scores if scorer is None or s.name == scorer)
    return float(score.metrics["accuracy"].value)


@pytest.mark.parametrize(("answer", "expected"), [(_add, 1.0), (lambda q: "I do not know", 0.0)])
def test_arithmetic_task_scores_an_oracle_and_a_wrong_answerer(answer, expected, tmp_path) -> None:  # type: ignore[no-untyped-def]
    task = resolve_tasks(["arithmetic"], {"num_problems": "6"})[0]
    logs = asyncio.run(_eval(task, ScriptedSamplingClient(answer), tmp_path))
    assert logs[0].status == "success"
    assert _accuracy(logs[0]) == expected
    assert logs[0].results.scores[0].scored_samples == 6


def _eval(task: object, client: ScriptedSamplingClient, log_dir: object, **kwargs: object):  # type: ignore[no-untyped-def]
    return eval_async(task, model=_model(client), log_dir=str(log_dir), **kwargs)  # type: ignore[arg-type]


def test_model_graded_qa_uses_our_model_as_the_grader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The grader is a Model over our bridge; it sees each answer and its verdict decides the score."""
    def answer(message: str) -> str:
        if "[Submission]" in message:  # the grading prompt: C when the submission equals the criterion
            submission = re.search(r"\[Submission\]: (.*?)\n", message).group(1)  # type: ignore[union-attr]
            criterion = re.search(r"\[Criterion\]: (.*?)\n", message).group(1)  # type: ignore[union-attr]
            return "GRADE: C" if submission == criterion else "GRADE: I"
        return "Paris" if "France" in message else "Milan"

    grader_client = ScriptedSamplingClient(answer)
    grader = _model(grader_client, temperature=0.0)
    task = Task(
        name="judge",
        dataset=MemoryDataset([Sample(input="What is the capital of France?", target="Paris"),
                               Sample(input="What is the capital of Italy?", target="Rome")]),
        solver=generate(),
        scorer=model_graded_qa(instructions="Respond 'GRADE: C' if correct or 'GRADE: I' otherwise.",
                               model=grader),
    )
    logs = asyncio.run(_eval(task, ScriptedSamplingClient(answer), tmp_path))
    assert logs[0].status == "success"
    assert _accuracy(logs[0]) == 0.5  # Paris graded C, Milan graded I
    grading_prompts = [grader_client.last_user_message(tokens) for tokens, _, _ in grader_client.requests]
    assert len(grading_prompts) == 2 and all("GRADE" in p for p in grading_prompts)


def test_registered_provider_opens_a_base_model_on_the_local_engine(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = get_model(f"recipes/{TINY}", config=GenerateConfig(max_tokens=4, temperature=0.0),
                      backend="local", memoize=False)
    assert isinstance(model.api, InspectAPIFromTinkerSampling)
    output = asyncio.run(model.generate("hello"))
    assert output.usage is not None and 1 <= output.usage.output_tokens <= 4
    assert output.usage.input_tokens == len(model.api.renderer.build_generation_prompt(
        [{"role": "user", "content": "hello"}]).to_ints())


def test_tool_calls_round_trip_through_an_inspect_agent_loop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Qwen3's template: tools declared in the prompt, a parsed call executed by Inspect, the result
    rendered back as a <tool_response>, and the final answer scored."""
    @tool
    def add():  # type: ignore[no-untyped-def]
        async def execute(a: int, b: int) -> int:
            """Add two integers.

            Args:
                a: The first integer.
                b: The second integer.
            """
            return a + b

        return execute

    def answer(message: str) -> str:
        if message.startswith("<tool_response>"):
            return f"The sum is {message.split()[1]}."
        return '<tool_call>\n{"name": "add", "arguments": {"a": 20, "b": 22}}\n</tool_call>'

    model_name = "Qwen/Qwen3-4B-Instruct-2507"
    client = ScriptedSamplingClient(answer, model_name=model_name)
    api = InspectAPIFromTinkerSampling(renderer_name="qwen3_instruct", model_name=model_name, sampling_client=client)
    task = Task(dataset=MemoryDataset([Sample(input="What is 20 + 22?", target="42")]),
                solver=[use_tools(add()), generate()], scorer=includes())
    logs = asyncio.run(eval_async(task, model=Model(api=api, config=GenerateConfig()), log_dir=str(tmp_path)))
    assert logs[0].status == "success" and _accuracy(logs[0]) == 1.0
    first_prompt, second_prompt = (client.tokenizer.decode(tokens) for tokens, _, _ in client.requests)
    assert '"name": "add"' in first_prompt and "<tools>" in first_prompt
    assert "<tool_response>\n42\n</tool_response>" in second_prompt
