"""CTranslate2 as the sampling peer: the base model converted to CT2's int8 format, 8 prompts x 64 tokens.

The workload is HF `generate`'s (`peers.hf_generate_run`): the 8 prompts our engine samples from,
64 new tokens each (`min_length` forbids an early end), temperature 1, no top-k or top-p
(`sampling_topk=0` samples from the full distribution). The model is the one `load_base_model`
gives, saved with its tokenizer as a Hugging Face folder and converted with weights quantised to
int8 (set-up, not timed). It runs under CT2's "int8" compute type (its fastest on a CPU: int8
matmuls) and under the bench's precision where this CPU supports it as a CT2 compute type.

`ctranslate2` is optional (the `[bench]` extra) and imported only here, inside the functions.
"""

from collections.abc import Callable
from pathlib import Path

import torch

from local_tinker.bench.data import SAMPLING_PROMPTS
from local_tinker.bench.trl_peer import INSTALL_HINT
from local_tinker.models import load_base_model
from local_tinker.tokenizers import get_tokenizer

NEW_TOKENS = 64


def ct2_missing() -> str | None:
    """Why the CTranslate2 rows cannot run (ctranslate2 is not importable), or None when they can."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError as error:
        return f"CTranslate2 rows skipped: ctranslate2 is not installed ({error}); {INSTALL_HINT}"
    return None


def supported_compute_types() -> set[str]:
    """CT2's compute types on this CPU (e.g. no "bfloat16" where its CPU build has no bf16 kernels)."""
    import ctranslate2

    return set(ctranslate2.get_supported_compute_types("cpu"))


def convert(model_name: str, folder: Path) -> Path:
    """`model_name` as a CT2 model with int8 weights under `folder` (through a Hugging Face folder there)."""
    from ctranslate2.converters import TransformersConverter

    hf_folder, ct2_folder = folder / "hf", folder / "ct2"
    load_base_model(model_name).save_pretrained(str(hf_folder))  # freed on return: the converter reloads it
    get_tokenizer(model_name).save_pretrained(str(hf_folder))
    TransformersConverter(str(hf_folder)).convert(str(ct2_folder), quantization="int8")
    return ct2_folder


def ct2_generate_run(ct2_folder: Path, model_name: str, compute_type: str) -> Callable[[], None]:
    """CT2's `Generator.generate_batch` under `compute_type`: 8 prompts x 64 new tokens, on torch's threads."""
    import ctranslate2

    generator = ctranslate2.Generator(str(ct2_folder), device="cpu", compute_type=compute_type,
                                      intra_threads=torch.get_num_threads())
    tokenizer = get_tokenizer(model_name)
    prompts = [tokenizer.convert_ids_to_tokens(tokenizer.encode(text)) for text in SAMPLING_PROMPTS]
    ctranslate2.set_random_seed(0)

    def run() -> None:
        results = generator.generate_batch(prompts, max_length=NEW_TOKENS, min_length=NEW_TOKENS, sampling_topk=0,
                                           sampling_topp=1.0, sampling_temperature=1.0,
                                           include_prompt_in_result=False)
        lengths = [len(result.sequences_ids[0]) for result in results]
        if lengths != [NEW_TOKENS] * len(prompts):  # the figure counts 8 x 64 tokens
            raise RuntimeError(f"CTranslate2 generated {lengths} tokens, not {NEW_TOKENS} per prompt")

    return run


def ct2_runs(model_name: str, precision: str, folder: Path) -> tuple[dict[str, Callable[[], None]], list[str]]:
    """The runs to time, by compute type ("int8", and `precision` where CT2 supports it on this CPU),
    and notes on what was skipped; the converted model lives under `folder`."""
    supported = supported_compute_types()
    ct2_folder = convert(model_name, folder)
    if precision not in supported:
        skipped = f"CTranslate2 {precision} row skipped: not a CT2 compute type on this CPU (it has {sorted(supported)})"
        return {"int8": ct2_generate_run(ct2_folder, model_name, "int8")}, [skipped]
    return {compute_type: ct2_generate_run(ct2_folder, model_name, compute_type)
            for compute_type in ("int8", precision)}, []
