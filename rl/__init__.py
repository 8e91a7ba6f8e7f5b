"""Reinforcement learning on user environments.

    types.py        Env, StepResult, Trajectory(Group), EnvGroupBuilder, RLDataset(Builder)
    problem_env.py  ProblemEnv: single-turn question/answer tasks in a few lines
    message_env.py  MessageEnv and EnvFromMessageEnv: multi-turn tasks written in chat messages
    dataset.py      groups of copies of an env, list-backed datasets, a model's renderer
    rollouts.py     run envs through a policy (TokenCompleter), group by group
    advantages.py   group-centred advantages, constant-group removal, KL shaping (pure)
    data.py         trajectories -> datums, minibatches of whole groups (pure)
    metrics.py      env/..., optim/kl_sample_train_v1|v2, optim/entropy (pure)
    sources.py      where a step's groups come from: on-policy, or off-by-K in the background
    transcripts.py  readable rollouts in <log_path>/rollouts/ and on the console
    evaluators.py   RLTestSetEvaluator: test/env/all/... on a held-out dataset
    train.py        Config and the training loop (sync, streaming minibatches, async)
    envs/           arithmetic, gsm8k, guess_number
"""
