"""On-policy distillation on the RL loop: the student samples, a teacher scores the student's own
tokens, and the per-token reverse KL between them is the student's (negative) advantage.

    advantages.py   reverse KL -> per-token advantages, and the `teacher_kl` metric (pure)
    data.py         a sampled completion + the teacher's log-probs -> datums (pure)
    datasets.py     prompt datasets, and prompts as single-turn envs for the RL loop
    teacher.py      the teacher: opened, scoring answers, and its scores as the RL step's hook
    train.py        Config, and `main`, which runs it as an `rl.train` run with the teacher's hook
"""
