"""Tiny-model runs use one torch thread: at this size two threads only add synchronisation, and on
a machine whose cores are busy with other work they make each step 10-20x slower."""

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
