"""Fixtures for the schema tests that build real DeepSpeed optimizers and schedulers on CPU."""

import logging
import socket

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def single_process_group():
    """A one-rank gloo process group, as the `deepspeed` launcher would set up for one CPU process."""
    import deepspeed
    import torch.distributed as dist

    with pytest.MonkeyPatch.context() as env:
        for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0",
                           "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
            env.setenv(key, value)
        if not dist.is_initialized():
            deepspeed.init_distributed(dist_backend="gloo")
        logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
        yield
    # The group stays up for the session: DeepSpeed caches its groups, so a destroyed and re-created default group
    # breaks later engines ("Group ... is not registered").
