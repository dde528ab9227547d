"""The two nn.Graph wrappers most Graph-mode tests need: run a model, or train it one step a call."""

from __future__ import annotations

from toynet import nn


class InferenceGraph(nn.Graph):
    """``graph(x)`` is ``model(x)``, traced and compiled."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


class TrainGraph(nn.Graph):
    """``graph(x, y)`` is one training step of ``model`` on ``loss_fn`` with ``optimizer``; returns the loss."""

    def __init__(self, model, loss_fn, optimizer):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def eager_losses(model, loss_fn, optimizer, x, y, steps, before_step=None):
    """The losses of ``steps`` Eager-mode training steps, written as the tutorials write them (what a
    TrainGraph must match); ``before_step(i)`` runs before step ``i`` (to change a learning rate, say)."""
    losses = []
    for i in range(steps):
        if before_step is not None:
            before_step(i)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
