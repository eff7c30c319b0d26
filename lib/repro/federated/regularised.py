"""The regularised client: local SGD with an EWC (SAFA) or a proximal (FedProx) penalty.

One ``ClientApp`` serves every server of the book that asks its clients for
a penalised local loss: SAFA sends per-parameter importance weights
(``ewc-lambda`` and ``fisher::<name>`` arrays) and may ask for the squared
full-batch gradients back (``want-fisher``); FedProx sends ``proximal-mu``.
With neither it trains exactly as the shared client.  SAFA's adaptive period
also asks (``want-tracking``) for the client's accuracy on its own data before
and after training and, the first time it samples a client
(``want-label-pattern``), for the label pattern of :func:`label_pattern`; the
answer is read without touching the training (tested bit for bit).
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from repro.federated.client import RunConfig, begin_round, client_app_with, config_number, finish_round, penalised_sgd
from repro.federated.task import TaskSpec, evaluate_on
from repro.models import get_weights

FISHER = "fisher::"


def gradient_of(name: str, p: torch.nn.Parameter) -> torch.Tensor:
    """The gradient of parameter ``name`` after a backward pass, detached (an error if it has none)."""
    if p.grad is None:
        raise RuntimeError(f"parameter {name!r} has no gradient (is it used in the forward pass?)")
    return p.grad.detach()


def squared_gradient(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Squared full-batch gradient of the mean cross-entropy, per parameter (a diagonal Fisher estimate)."""
    model.zero_grad(set_to_none=True)
    model.eval()
    torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    out = {k: (gradient_of(k, p) ** 2).numpy().copy() for k, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return out


def label_pattern(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Which classes a client holds, read from the signs of its full-batch gradient of the last layer's weight.

    Row ``c`` of that gradient is ``sum_i (p_ic - [y_i = c]) h_i`` over the client's samples,
    with ``h_i`` the last layer's input.  When ``h_i >= 0`` (a ReLU before the last layer) a
    class the client lacks has a row with no negative entry; a class it holds usually has one,
    but not always (a few samples of it among many of other classes can leave its row positive,
    depending on the model).  SAFA's code groups the clients by this 0/1 pattern.  The
    gradient is taken with :func:`torch.autograd.grad`, leaving the parameters' ``.grad`` alone.

    Returns
    -------
    ndarray of int
        1 where the class's row has a negative entry, else 0.
    """
    weight = [p for p in model.parameters() if p.dim() == 2][-1]
    model.eval()
    loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
    (grad,) = torch.autograd.grad(loss, [weight])
    return (grad < 0).any(dim=1).to(torch.int64).numpy()


def train_regularised(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """One round of the regularised client: local SGD with an EWC or a proximal penalty.

    The config's ``ewc-lambda`` (with ``fisher::`` arrays) or ``proximal-mu`` sets the penalty.
    """
    rnd = begin_round(spec, msg, context)
    theta = {k: v for k, v in rnd.received.items() if not k.startswith(FISHER)}
    lam, mu = config_number(rnd.config, "ewc-lambda", 0.0), config_number(rnd.config, "proximal-mu", 0.0)
    tracking = bool(rnd.config.get("want-tracking", False))
    if tracking:  # before training: the accuracy the model arrives with, and the client's label pattern if asked
        extra: dict[str, int | float | list[int]] = {"arrival-accuracy": evaluate_on(rnd.model, rnd.x, rnd.y)["accuracy"]}
        if bool(rnd.config.get("want-label-pattern", False)):
            extra["label-pattern"] = [int(v) for v in label_pattern(rnd.model, rnd.x, rnd.y)]
    if lam > 0 and mu > 0:
        raise ValueError("a round cannot ask for both ewc-lambda and proximal-mu")
    if lam > 0:
        weight: dict[str, np.ndarray] | float = {k[len(FISHER):]: lam * v for k, v in rnd.received.items()
                                                 if k.startswith(FISHER)}
    else:
        weight = mu / 2.0
    loss = penalised_sgd(rnd.model, rnd.x, rnd.y, rnd.settings, anchor=theta, weight=weight)
    out = get_weights(rnd.model)
    if bool(rnd.config.get("want-fisher", False)):
        out.update({FISHER + k: v for k, v in squared_gradient(rnd.model, rnd.x, rnd.y).items()})
    metrics: dict[str, int | float | list[int] | list[float]] = {
        "model-index": int(config_number(rnd.config, "model-index", -1))}
    if tracking:
        metrics.update(extra, **{"departure-accuracy": evaluate_on(rnd.model, rnd.x, rnd.y)["accuracy"]})
    return finish_round(msg, rnd, out, loss, metrics)


def make_regularised_client_app(spec: TaskSpec, run_config: RunConfig | None = None) -> ClientApp:
    """A ``ClientApp`` whose local SGD can carry an EWC (SAFA) or proximal (FedProx) penalty.

    Config keys beyond the shared client's: ``ewc-lambda`` (with ``fisher::<name>``
    arrays: the importance), ``proximal-mu``, ``want-fisher`` (reply with the
    squared full-batch gradients as ``fisher::<name>``), ``want-tracking`` (reply
    with ``arrival-accuracy`` and ``departure-accuracy``, and ``label-pattern`` if ``want-label-pattern``) and
    ``model-index`` (echoed back).  With none of them it trains exactly as the shared client.
    """
    return client_app_with(lambda msg, context: train_regularised(spec, msg, context), run_config)
