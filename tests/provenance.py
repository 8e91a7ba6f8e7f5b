"""Provenance for RL datums in tests, written as tinker-cookbook 0.6.1's `rl_loop` writes it."""

from tinker import types


def with_sampled_provenance(datum: types.Datum, prompt_length: int, num_sampled: int, sequence_id: str) -> types.Datum:
    """The prompt, then the sampled tokens, of one sequence: the model input drops the last sampled
    token, the targets the first prompt token."""
    return datum.with_provenance(
        model_input=[types.PromptProvenanceSpan(sequence_id=sequence_id, length=prompt_length),
                     types.SampledProvenanceSpan(sequence_id=sequence_id, length=num_sampled - 1)],
        loss_fn_inputs=[types.PromptProvenanceSpan(sequence_id=sequence_id, offset=1, length=prompt_length - 1),
                        types.SampledProvenanceSpan(sequence_id=sequence_id, length=num_sampled)])
