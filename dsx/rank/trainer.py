"""A data-parallel rank's optimizer step under deepspeed.initialize, and the step's loss over every replica.

engine.step() runs under torch.no_grad(): an optimizer step needs no autograd, and DeepSpeed 0.18.9's ZeRO-1/2 step
all-gathers into views of a flat buffer autograd tracks, which torch 2.13's gloo refuses ("Output 0 of Split is a view
and is being modified inplace"; a `--python` lane on CPU ranks). Ulysses' trainer (dsx.rank.ulysses) and the
pipeline's (dsx.rank.pipeline) answer the same calls.
"""

from __future__ import annotations


class Trainer:
    """A model under deepspeed.initialize and its optimizer step: grad_accum micro-batches of forward +
    engine.backward + engine.step."""

    def __init__(self, engine):
        self.engine = engine
        engine.train()

    def data_parallel(self) -> tuple[int, int]:
        """(this rank's replica, replicas): every rank is a data-parallel replica of the whole model."""
        import deepspeed.comm as dist

        return dist.get_rank(), dist.get_world_size()

    def step_loss(self, losses: list) -> float:
        """The step's mean loss over every replica's micro-batches: one all-reduce of one number (through
        torch.distributed, which DeepSpeed's comms logger does not count)."""
        import torch

        value = torch.stack([x.float() for x in losses]).mean()
        replicas = self.data_parallel()[1]
        if replicas > 1:
            torch.distributed.all_reduce(value)
            value = value / replicas
        return float(value.item())

    def step(self, batches: list[dict]) -> list:
        """One optimizer step; the micro-batches' losses (detached)."""
        import torch

        losses = []
        for batch in batches:
            loss = self.engine(**batch).loss
            self.engine.backward(loss)
            with torch.no_grad():  # see the module's docstring
                self.engine.step()
            losses.append(loss.detach())
        return losses

    def finish(self) -> None:
        """After the timed steps (nothing to do here)."""
