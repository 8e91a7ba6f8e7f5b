"""`qa` and `qa_judged`: short general-knowledge questions the team wrote, with one-phrase answers.

`qa` is graded by inclusion (the answer contains the target, case-insensitive); `qa_judged` asks a
model to grade each answer against the target (`model_graded_qa`), by default the model being
evaluated itself: an LLM-as-judge task that runs offline on our own model. Its grader answers yes or
no (Inspect maps yes to 1 and no to 0), which even a 135M model does.
"""

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig, Model
from inspect_ai.scorer import includes, model_graded_qa
from inspect_ai.solver import generate

QUESTIONS: tuple[tuple[str, str], ...] = (
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Italy?", "Rome"),
    ("What is the capital of Japan?", "Tokyo"),
    ("What is the capital of Germany?", "Berlin"),
    ("What is the capital of Spain?", "Madrid"),
    ("What is the capital of Canada?", "Ottawa"),
    ("What is the largest planet in the solar system?", "Jupiter"),
    ("Which planet is known as the Red Planet?", "Mars"),
    ("What is the chemical symbol for gold?", "Au"),
    ("What gas do plants absorb from the air for photosynthesis?", "carbon dioxide"),
    ("How many days are there in a week?", "seven"),
    ("How many legs does a spider have?", "eight"),
    ("What is the freezing point of water in degrees Celsius?", "0"),
    ("Who wrote the play Romeo and Juliet?", "Shakespeare"),
    ("What is the largest ocean on Earth?", "Pacific"),
    ("What color do you get by mixing blue and yellow?", "green"),
    ("Which animal is known as the king of the jungle?", "lion"),
    ("What is the opposite of hot?", "cold"),
    ("What language is mainly spoken in Brazil?", "Portuguese"),
    ("What is the tallest mountain in the world?", "Everest"),
)

# A 135M grader does not keep Inspect's "GRADE: C" protocol (SmolLM2 does not write it), but it does
# start its reply with yes or no; the first yes/no word is the grade.
JUDGE_INSTRUCTIONS = (
    "Does the submission give the same answer as the criterion? Reply with one word: Yes or No."
)
JUDGE_GRADE_PATTERN = r"(?i)\b(yes|no)\b"


def qa_samples() -> list[Sample]:
    return [Sample(input=question, target=answer, id=i) for i, (question, answer) in enumerate(QUESTIONS)]


@task
def qa(max_tokens: int = 48) -> Task:
    """Short answers, correct when they contain the target (case-insensitive)."""
    return Task(
        name="qa",
        dataset=MemoryDataset(qa_samples(), name="qa"),
        solver=generate(),
        scorer=includes(),
        config=GenerateConfig(temperature=0.0, max_tokens=max_tokens),
    )


@task
def qa_judged(max_tokens: int = 48, grader: Model | str | None = None) -> Task:
    """The same questions graded by a model (`grader`; default: the model being evaluated)."""
    return Task(
        name="qa_judged",
        dataset=MemoryDataset(qa_samples(), name="qa_judged"),
        solver=generate(),
        scorer=model_graded_qa(instructions=JUDGE_INSTRUCTIONS, grade_pattern=JUDGE_GRADE_PATTERN, model=grader),
        config=GenerateConfig(temperature=0.0, max_tokens=max_tokens),
    )
