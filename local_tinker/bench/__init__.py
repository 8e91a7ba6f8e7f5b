"""`make bench`: local-engine speed on this machine, beside its own peak and beside the peers.

Prints, and with `json_path=` writes every figure of, for SmolLM2-135M with LoRA rank 32 in fp32
and bf16 autocast:

- training tokens/s of `forward_backward` + `optim_step` on 8 x 128 tokens (every token weighted,
  and a prompt-masked variant where 1 token in 4 carries loss), and its share of the matmul peak
  (model FLOPs from the config: 4 N per trained token, N = matmul weights incl. unembedding), and
  a ceiling: the step's matmuls alone, timed inside it (forward and backward), which no step made
  of those matmuls beats; beside TRL, the same ceiling of our step as a multiple of the best setting;
- sampling tokens/s for 8 distinct prompts x 64 new tokens, 1 prompt with `num_samples=8`, and the
  8 prompts from a rank-32 LoRA snapshot, against the weight-streaming bound (bandwidth measured),
  and the ceiling the machine's small-batch matmuls set below it: a decode step of 8 rows timed as
  nothing but its matmuls (the engine's own packed projections and head);
- the RL-shaped batch: 8 number-words prompts x 4 samples, up to 32 new tokens, stopping at
  end-of-turn, from a fresh LoRA snapshot every iteration (the snapshot switch timed with it);
- peers in the same run: a plain peft training loop, HF `generate`, CTranslate2 (int8, and the
  bench's precision where this CPU build offers it), and (bf16) TRL's `SFTTrainer`
  + PEFT at each of a few settings, alternating with our engine on the same token ids, on
  number-to-words chats (batch 8, loss on the answer) and on 8 x 128 tokens, the best one kept
  (`trl` and `ctranslate2` come with the optional `[bench]` extra; without them those rows are
  skipped, saying so);
- with `server=True`: the same training and sampling through the official `tinker` SDK against
  `local_tinker.server`, timed alternately with the in-process calls;
- peak RSS of each workload group, each run in a process of its own (`isolate=True`);
- with `device=cuda`: the engine and the peft/`generate` peers on the GPU, against the GPU's peak
  and memory read (the CPU-only rows are skipped, saying so).

Run: `python -m local_tinker.bench [repeats=5] [precisions=float32,bfloat16] [server=True]
[trl_settings=bf16_sdpa,bf16_padding_free] [json_path=out.json]`. Medians over repeats after one
warm-up; this 2-core VM is noisy, so read ratios, not digits.
"""

from local_tinker.bench.run import BenchConfig, main

__all__ = ["BenchConfig", "main"]
