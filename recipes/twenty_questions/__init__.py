"""Twenty questions: multi-turn RL of a question-asking player against a fixed answerer model."""
