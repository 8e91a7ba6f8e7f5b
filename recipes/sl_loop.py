"""A supervised training loop written out flat on the client surface: read, render, step, log, save.

    python -m recipes.sl_loop
    python -m recipes.sl_loop learning_rate=3e-4 log_path=/tmp/sft-lr-sweep/lr-3e-4

It trains a LoRA adapter on the conversations of a JSONL file (default: the repository's
example_data/conversations.jsonl) with one `forward_backward` + `optim_step` per batch and a linear
learning-rate decay, writing metrics.jsonl and checkpoints.jsonl to log_path; a rerun resumes.
`supervised/train.py` does the same job with request pipelining, evaluators and dataset builders.
"""

from pathlib import Path

import chz
import numpy as np
from tinker import types

from recipes_lib.backends import make_service_client
from recipes_lib.checkpoints import create_or_resume_training_client, save_checkpoint
from recipes_lib.cli import run_recipe
from recipes_lib.config import BackendConfig, backend_field, check_positive
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.hyperparams import get_lr
from recipes_lib.lifecycle import start_run
from recipes_lib.model_info import get_recommended_renderer_name
from recipes_lib.paths import SMOLLM2_NAME
from recipes_lib.run_config import LogdirBehavior
from recipes_lib.summary import setup_logging
from recipes_lib.tokenizers import get_tokenizer
from renderers import TrainOnWhat, get_renderer
from supervised.datasets import read_conversations_jsonl
from supervised.datums import compute_mean_nll, conversation_to_datum

EXAMPLE_FILE = str(Path(__file__).resolve().parents[1] / "example_data" / "conversations.jsonl")


@chz.chz
class Config:
    log_path: str = "/tmp/recipes-examples/sl_loop"
    model_name: str = SMOLLM2_NAME
    file_path: str = EXAMPLE_FILE  # one {"messages": [...]} per line
    batch_size: int = 8
    num_epochs: int = 3
    learning_rate: float = get_lr(SMOLLM2_NAME)  # the Tinker docs' formula; ~1.3e-3 for SmolLM2
    max_length: int = 1024
    train_on_what: TrainOnWhat = TrainOnWhat.ALL_ASSISTANT_MESSAGES
    lora_rank: int = 32
    save_every: int = 10  # steps between resumable checkpoints
    max_steps: int | None = None
    backend: BackendConfig = backend_field()
    behavior_if_log_dir_exists: LogdirBehavior = "ask"

    @chz.validate
    def _check(self) -> None:
        check_positive(learning_rate=self.learning_rate, batch_size=self.batch_size, num_epochs=self.num_epochs,
                       lora_rank=self.lora_rank, max_steps=self.max_steps)


def main(config: Config) -> None:
    resume = start_run(config)  # checks the log folder; the last saved batch to continue after, if any
    renderer = get_renderer(get_recommended_renderer_name(config.model_name), get_tokenizer(config.model_name))
    conversations = [messages for _, messages in read_conversations_jsonl(config.file_path)]
    batches_per_epoch = len(conversations) // config.batch_size
    if batches_per_epoch == 0:
        raise ConfigurationError(f"{config.file_path} has fewer than batch_size={config.batch_size} conversations.")
    total_steps = batches_per_epoch * config.num_epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)

    start_step = resume.epoch * batches_per_epoch + resume.batch if resume else 0
    if start_step >= total_steps:
        print(f"{config.log_path} already holds a finished run.")
        return
    service_client = make_service_client(config.backend)
    training_client = create_or_resume_training_client(service_client, config.model_name, config.lora_rank, resume)
    metrics_logger = setup_logging(config.log_path, config, total_steps, start_step)

    for step in range(start_step, total_steps):
        epoch, batch_index = divmod(step, batches_per_epoch)
        order = np.random.default_rng(epoch).permutation(len(conversations))  # a new order each epoch
        rows = order[batch_index * config.batch_size : (batch_index + 1) * config.batch_size]
        batch = [conversation_to_datum(conversations[i], renderer, config.max_length, config.train_on_what)
                 for i in rows]

        learning_rate = config.learning_rate * (1 - step / total_steps)  # linear decay to 0
        forward_backward = training_client.forward_backward(batch, "cross_entropy")
        optim_step = training_client.optim_step(
            types.AdamParams(learning_rate=learning_rate, beta1=0.9, beta2=0.95, eps=1e-8))
        logprobs = [out["logprobs"].to_numpy() for out in forward_backward.result().loss_fn_outputs]
        optim_step.result()

        weights = [datum.loss_fn_inputs["weights"].to_numpy() for datum in batch]
        metrics_logger.log_metrics({
            "epoch": epoch,
            "progress": (step + 1) / total_steps,
            "learning_rate": learning_rate,
            "num_sequences": len(batch),
            "num_tokens": sum(datum.model_input.length for datum in batch),
            "train_mean_nll": compute_mean_nll(logprobs, weights),
        }, step)
        if config.save_every and (step + 1) % config.save_every == 0 and step + 1 < total_steps:
            next_epoch, next_batch = divmod(step + 1, batches_per_epoch)
            save_checkpoint(training_client, config.log_path, f"{step + 1:06d}", next_batch, next_epoch)

    final_epoch, final_batch = divmod(total_steps, batches_per_epoch)
    save_checkpoint(training_client, config.log_path, "final", final_batch, final_epoch, final=True)
    metrics_logger.close()


if __name__ == "__main__":
    run_recipe(main, chz.Blueprint(Config))
