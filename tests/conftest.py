import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Small models run fastest (and most reproducibly) on one thread."""
    torch.set_num_threads(1)
    yield
