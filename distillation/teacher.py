"""The teacher: opened as a sampling client, it scores the student's sampled answers, and its scores
become the RL step's per-token advantages and the top-k forward-KL extra loss (`TeacherScorer`).

`TeacherScorer` is an `rl.hooks.BatchShaper`: the RL loop hands it each minibatch of the student's
single-turn answers (their group advantages, from rewards of 0, are 0), and it returns

- the same datums with `-kl_penalty_coef * (student - teacher)` log-prob added to each sampled
  token's advantage (`center_kl`: the minibatch's mean KL as a baseline; `kl_discount_factor`:
  discounted over later tokens; see `distillation.advantages`), trained with the run's `loss_fn`;
- with `forward_kl_topk=k > 0`, an extra `cross_entropy` loss on the teacher's k likeliest tokens at
  each position (`distillation.data.forward_kl_data`), sent before the same `optim_step`; with
  `kl_penalty_coef=0` the policy-gradient pass is then left out (every advantage would be 0);
- metrics: `teacher_kl`, `forward_kl_topk`, `optim/forward_kl_loss_sum`, `completion_tokens`,
  `num_tokens` (prompts + answers) and `time/teacher`.

A datum with no sampled token (an empty answer) is left out, as the old loop skipped empty samples.
"""

import asyncio
import time
from dataclasses import dataclass

import numpy as np
from tinker import types
from tinker.types.topk_logprobs import TopkLogprobs

from distillation.advantages import reverse_kl_advantages, teacher_kl
from distillation.data import (
    Completion,
    completion_from_datum,
    forward_kl_data,
    forward_kl_topk,
    teacher_targets_T,
)
from eval.model_source import backend_for, open_model_source
from recipes_lib.backends.protocols import SamplingClient, ServiceClient
from recipes_lib.config import BackendConfig
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.run_folder import last_sampler_path
from recipes_lib.tokenizers import get_tokenizer
from rl.data import TrainingBatch, loss_input, with_advantages
from rl.hooks import ExtraLoss, ShapedBatch


@dataclass(frozen=True)
class TeacherSource:
    """Where the teacher comes from: exactly one of a sampler checkpoint, a run folder, a base model."""

    model_path: str | None
    log_path: str | None
    model_name: str | None


def open_teacher(source: TeacherSource, student_model: str, backend: BackendConfig,
                 service: ServiceClient) -> SamplingClient:
    """The teacher's sampling client; its tokenizer must be the student's."""
    model_path = last_sampler_path(source.log_path) if source.log_path else source.model_path
    same_backend = backend_for(model_path, backend) == backend
    opened = open_model_source(backend, model_path, None if model_path else source.model_name,
                               service_client=service if same_backend else None)
    if opened.model_name != student_model and \
            get_tokenizer(opened.model_name).get_vocab() != get_tokenizer(student_model).get_vocab():
        raise ConfigurationError(f"The teacher {model_path or opened.model_name} runs {opened.model_name}, whose "
                                 f"tokenizer differs from the student's ({student_model}); on-policy "
                                 "distillation scores the student's tokens with the teacher, so both need one "
                                 "tokenizer.")
    return opened.sampling_client


async def score_with_teacher(
    teacher: SamplingClient, completions: list[Completion], topk: int = 0
) -> tuple[list[np.ndarray], list[TopkLogprobs]]:
    """The teacher's log-prob of each target token of each completion, shape (T,) each, and with
    `topk > 0` its top-k at every position of each sequence (else an empty list).

    Top-k comes from `sample(..., include_prompt_logprobs=True, topk_prompt_logprobs=k)` on the
    sequence, which the hosted API and the local engine both serve; the one token it samples is unused.
    """
    if topk == 0:
        scored = await asyncio.gather(*(teacher.compute_logprobs(types.ModelInput.from_ints(c.sequence))
                                        for c in completions))
        return [teacher_targets_T(c, logprobs) for c, logprobs in zip(completions, scored, strict=True)], []
    params = types.SamplingParams(max_tokens=1, temperature=1.0)
    responses = await asyncio.gather(*(
        teacher.sample(types.ModelInput.from_ints(c.sequence), 1, params, include_prompt_logprobs=True,
                       topk_prompt_logprobs=topk)
        for c in completions))
    teacher_T, topk_D = [], []
    for completion, response in zip(completions, responses, strict=True):
        if response.prompt_logprobs is None or response.topk_prompt_logprobs_np is None:
            raise ConfigurationError("The teacher's sampler returned no prompt log-probs; forward_kl_topk needs "
                                     "a backend that serves include_prompt_logprobs and topk_prompt_logprobs.")
        teacher_T.append(teacher_targets_T(completion, response.prompt_logprobs))
        topk_D.append(response.topk_prompt_logprobs_np)
    return teacher_T, topk_D


@dataclass(frozen=True)
class TeacherScorer:
    """The RL step's shaper hook of on-policy distillation (see the module docstring)."""

    teacher: SamplingClient
    kl_penalty_coef: float = 1.0
    kl_discount_factor: float = 0.0
    center_kl: bool = False
    forward_kl_topk: int = 0
    forward_kl_coef: float = 1.0
    forward_kl_until_divergence: bool = False

    async def __call__(self, batch: TrainingBatch) -> ShapedBatch:
        started = time.monotonic()
        batch = _with_sampled_tokens(batch)
        completions = [completion_from_datum(d, m) for d, m in zip(batch.data_D, batch.masks_D, strict=True)]
        teacher_T, topk_D = await score_with_teacher(self.teacher, completions, self.forward_kl_topk)
        targets = [c.targets_T() for c in completions]
        student_D, masks_D = [t[0] for t in targets], [t[1] for t in targets]
        batch_kl = teacher_kl(student_D, teacher_T, masks_D)
        baseline = batch_kl if self.center_kl else 0.0
        advantages_D = [loss_input(d, "advantages") + reverse_kl_advantages(
            s, t, m, self.kl_penalty_coef, self.kl_discount_factor, baseline)
            for d, s, t, m in zip(batch.data_D, student_D, teacher_T, masks_D, strict=True)]
        shaped = TrainingBatch([with_advantages(d, a) for d, a in zip(batch.data_D, advantages_D, strict=True)],
                               batch.masks_D, batch.group_index_D, batch.trajectory_index_D)
        extra = [self._forward_kl_loss(completions, topk_D, masks_D)] if topk_D else []
        metrics = {"teacher_kl": batch_kl, "completion_tokens": float(np.mean([len(c.tokens) for c in completions])),
                   "num_tokens": float(sum(len(c.sequence) for c in completions)),  # prompts + answers, for tokens/s
                   "time/teacher": time.monotonic() - started}
        return ShapedBatch(shaped, metrics, extra, policy_loss=self.kl_penalty_coef > 0 or not topk_D)

    def _forward_kl_loss(self, completions: list[Completion], topk_D: list[TopkLogprobs],
                         masks_D: list[np.ndarray]) -> ExtraLoss:
        """The top-k forward-KL `cross_entropy` pass, with its metrics from the trainer's log-probs."""
        data_D = [datum for completion, topk in zip(completions, topk_D, strict=True)
                  for datum in forward_kl_data(completion, topk, self.forward_kl_coef, self.forward_kl_until_divergence)]
        weights_D = [d.loss_fn_inputs["weights"].to_numpy() for d in data_D]
        num_tokens = sum(float(m.sum()) for m in masks_D)

        def metrics(output: types.ForwardBackwardOutput) -> dict[str, float]:
            trainer_D = [o["logprobs"].to_numpy() for o in output.loss_fn_outputs]
            return {"forward_kl_topk": forward_kl_topk(weights_D, trainer_D, self.forward_kl_coef, num_tokens),
                    "optim/forward_kl_loss_sum": float(output.metrics.get("loss:sum", 0.0))}

        return ExtraLoss(data_D, "cross_entropy", metrics)


def _with_sampled_tokens(batch: TrainingBatch) -> TrainingBatch:
    """The batch without datums that hold no sampled token (empty answers)."""
    keep = [i for i, mask in enumerate(batch.masks_D) if float(np.sum(mask)) > 0]
    if not keep:
        raise ConfigurationError("Every completion of the batch was empty; check max_tokens and the stop sequences.")
    return TrainingBatch([batch.data_D[i] for i in keep], [batch.masks_D[i] for i in keep],
                         [batch.group_index_D[i] for i in keep], [batch.trajectory_index_D[i] for i in keep])
