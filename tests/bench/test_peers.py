"""The plain peft loop the bench compares with, on the chats: padded rows, the loss on the weighted targets."""

import torch
import torch.nn.functional as F

from local_tinker.bench.data import TokenBatch, bench_numbers, number_words_batch
from local_tinker.bench.peers import padded_inputs, peft_loop_step
from local_tinker.models import load_base_model

TINY = "recipes/tiny-llama"


def test_rows_are_right_padded_and_only_weighted_targets_are_labels() -> None:
    batch = TokenBatch(tokens_S=[[5, 6, 7, 8], [9, 10]], weights_S=[[0.0, 1.0, 1.0], [1.0]])
    inputs = padded_inputs(batch)
    assert inputs["input_ids"].tolist() == [[5, 6, 7, 8], [9, 10, 0, 0]]
    assert inputs["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert inputs["labels"].tolist() == [[-100, -100, 7, 8], [-100, 10, -100, -100]]


def test_the_padded_loss_is_the_mean_over_each_chats_own_weighted_targets(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """The model's loss on the padded batch against each chat run alone, unpadded, its weighted targets'
    cross-entropy averaged over all of them: padding and unweighted targets add nothing."""
    batch = number_words_batch(tiny_tokenizer, bench_numbers())
    assert len({len(tokens) for tokens in batch.tokens_S}) > 1  # the rows do get padded
    model = load_base_model(TINY).eval()
    with torch.no_grad():
        loss = model(**padded_inputs(batch)).loss
        losses = []
        for tokens, weights in zip(batch.tokens_S, batch.weights_S, strict=True):
            logits = model(input_ids=torch.tensor([tokens])).logits[0, :-1]
            every = F.cross_entropy(logits.float(), torch.tensor(tokens[1:]), reduction="none")
            losses += [value for value, weight in zip(every.tolist(), weights, strict=True) if weight]
    torch.testing.assert_close(loss, torch.tensor(sum(losses) / len(losses)), rtol=1e-5, atol=1e-5)


def test_a_peft_loop_step_on_the_chats_trains_the_adapter(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    step = peft_loop_step(TINY, "float32", batch=number_words_batch(tiny_tokenizer, bench_numbers()))
    lora_b = [p for name, p in step.model.named_parameters() if "lora_B" in name]
    assert lora_b and all(not p.any() for p in lora_b)  # peft starts B at zero
    step()
    assert all(p.any() for p in lora_b)  # one AdamW step moves every B, the head's included
