"""Fixtures shared by the test modules."""

from collections.abc import Iterator

import pytest
import torch
from threadpoolctl import threadpool_limits


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Tiny models: one thread (torch, BLAS, OpenMP) is faster, and immune to a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(threads)
