# ruff: noqa: I001, UP035  (the Tinker docs' import layout, kept so the diff to the Tinker docs is imports only)
"""The Tinker docs' LLM-as-judge Inspect task (page "Evaluations"), verbatim except imports and model names.

Changed lines carry the Tinker docs' original in a comment: the two imports, and the model names (the
Tinker docs' Llama-3.1-8B is not available offline; the tests use the tiny test model with its renderer).
"""

from local_tinker import clients as tinker  # import tinker
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig as InspectAIGenerateConfig
from inspect_ai.model import Model as InspectAIModel
from inspect_ai.scorer import model_graded_qa
from inspect_ai.solver import generate
from eval.inspect_bridge import InspectAPIFromTinkerSampling  # from tinker_cookbook.eval.inspect_utils import ...

MODEL_NAME = "recipes/tiny-llama"  # the Tinker docs write "meta-llama/Llama-3.1-8B-Instruct" in the lines below
RENDERER_NAME = "smollm2"  # the Tinker docs write "llama3"

QA_DATASET = MemoryDataset(
    name="qa_dataset",
    samples=[
        Sample(
            input="What is the capital of France?",
            target="Paris",
        ),
        Sample(
            input="What is the capital of Italy?",
            target="Rome",
        ),
    ],
)

service_client = tinker.ServiceClient()
sampling_client = service_client.create_sampling_client(
    base_model=MODEL_NAME
)

api = InspectAPIFromTinkerSampling(
    renderer_name=RENDERER_NAME, 
    model_name=MODEL_NAME,
    sampling_client=sampling_client,
    verbose=False,
)

GRADER_MODEL = InspectAIModel(api=api, config=InspectAIGenerateConfig())


@task
def example_lm_as_judge() -> Task:
    """
    Example task using LLM-as-a-judge scoring.

    Note: The grader model defaults to the model being evaluated.
    To use a different grader model, specify it with --model-grader when using inspect directly.
    """
    return Task(
        name="llm_as_judge",
        dataset=QA_DATASET,
        solver=generate(),
        scorer=model_graded_qa(
            instructions="Grade strictly against the target text as general answer key and rubric. "
            "Respond 'GRADE: C' if correct or 'GRADE: I' otherwise.",
            partial_credit=False,
            # model parameter is optional - if not specified, uses the model being evaluated
            model=GRADER_MODEL,
        ),
    )
