"""On-policy distillation: the student samples, a teacher scores the student's own tokens, and the
per-token reverse KL between them is the student's (negative) advantage.

    advantages.py   reverse KL -> per-token advantages, and the `teacher_kl` metric (pure)
    data.py         a sampled completion + the teacher's log-probs -> an `importance_sampling` datum (pure)
    datasets.py     prompt datasets (conversations that end before the assistant's turn)
    train.py        Config + the training loop (sample -> score -> to_datums -> train -> log)
"""
