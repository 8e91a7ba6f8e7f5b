"""The reference cookbook's `ml_log` module, as aliases only: the run's metric loggers, from
`recipes_lib.logging` and `recipes_lib.summary`.

    from recipes_lib.utils import ml_log
    ml_logger = ml_log.setup_logging(log_dir, config, total_steps)  # config.json + metrics.jsonl (+ W&B)
    ml_logger.log_metrics(metrics, step=i_batch)
"""

from recipes_lib.logging import JsonlLogger, MetricsLogger, MultiplexLogger
from recipes_lib.summary import setup_logging

__all__ = ["JsonlLogger", "MetricsLogger", "MultiplexLogger", "setup_logging"]
