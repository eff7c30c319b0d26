"""Discrete-event model of one data-parallel training iteration, with and without overlap (SimPy).

A compute process runs the forward pass, then back-propagates the layers from
the output to the input; each layer with parameters hands its gradient to a
FIFO queue.  A communication process (the paper's communication thread)
takes the gradients one by one and allreduces each with the alpha-beta ring
cost of :mod:`repro.training.cost`.  With overlap, a gradient is queued as
soon as it is produced; without, all are queued once back-propagation ends.
The iteration ends when both processes are done.  Per-layer costs come from
analytic FLOP and parameter counts (:func:`vgg_a_layers`); the node speed
and network constants are assumptions that the chapter sweeps.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from repro.training.cost import Network, ring_allreduce_time


@dataclass(frozen=True, kw_only=True)
class Layer:
    """A layer's forward FLOPs per sample and its parameter count."""

    name: str
    forward_flops: float
    params: int


@dataclass(frozen=True, kw_only=True)
class Platform:
    """Effective node speed (FLOP/s), network, bytes per parameter and backward/forward cost ratio."""

    node_flops: float = 1e12
    net: Network = Network(alpha=5e-6, beta=1.0 / 8e9)
    bytes_per_param: int = 4
    backward_ratio: float = 2.0


@dataclass(frozen=True, kw_only=True)
class IterationTime:
    """Simulated durations of one iteration on one node (seconds)."""

    forward: float
    backward: float
    communication: float
    total: float

    @property
    def exposed_communication(self) -> float:
        """Communication not hidden behind computation."""
        return self.total - self.forward - self.backward


def _conv_stack(cfg: list, image: int, cin: int = 3) -> tuple[list[Layer], int, int]:
    layers, side, k = [], image, 0
    for v in cfg:
        if v == "M":
            side //= 2
            continue
        layers.append(Layer(name=f"conv{k}", forward_flops=2.0 * side * side * cin * v * 9, params=cin * v * 9 + v))
        cin, k = v, k + 1
    return layers, cin, side


VGG_A_CONV = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


def vgg_a_layers(image: int = 224, num_classes: int = 1000) -> list[Layer]:
    """VGG-A (11 weight layers): 8 convolutions and 3 FC layers, FLOPs per sample and parameters."""
    convs, c, side = _conv_stack(VGG_A_CONV, image)
    dims = [c * side * side, 4096, 4096, num_classes]
    fcs = [Layer(name=f"fc{i}", forward_flops=2.0 * a * b, params=a * b + b) for i, (a, b) in enumerate(zip(dims[:-1], dims[1:]))]
    return convs + fcs


def conv_heavy_layers(image: int = 224, num_classes: int = 1000) -> list[Layer]:
    """The control network: about VGG-A's FLOPs but a small fraction of its parameters.

    VGG-A's convolutions, two more 3x3 convolutions at the last scale, global pooling and one small FC layer.
    """
    convs, c, side = _conv_stack(VGG_A_CONV[:-1], image)
    extra = [Layer(name=f"conv_extra{i}", forward_flops=2.0 * side * side * c * c * 9, params=c * c * 9 + c) for i in range(2)]
    return convs + extra + [Layer(name="fc", forward_flops=2.0 * c * num_classes, params=c * num_classes + num_classes)]


def simulate_iteration(layers: list[Layer], nodes: int, batch: int, platform: Platform,
                       overlap: bool) -> IterationTime:
    """Simulate one iteration of synchronous data parallelism on ``nodes`` nodes, global batch ``batch``.

    Parameters
    ----------
    layers
        The model's layers in forward order.
    nodes
        Number of nodes P (one process each); the batch is split evenly.
    batch
        Global mini-batch size B (strong scaling).
    platform
        Node speed and network constants.
    overlap
        Queue each gradient as soon as back-propagation produces it (else after the whole pass).

    Returns
    -------
    IterationTime
        Forward, backward and communication busy times and the iteration time.
    """
    env = simpy.Environment()
    queue: simpy.Store = simpy.Store(env)
    per_node = batch / nodes
    fwd = sum(layer.forward_flops for layer in layers) * per_node / platform.node_flops
    done = {"backward": 0.0, "comm": 0.0, "busy": 0.0}

    def compute():
        yield env.timeout(fwd)
        held = []
        for layer in reversed(layers):
            yield env.timeout(platform.backward_ratio * layer.forward_flops * per_node / platform.node_flops)
            if layer.params:
                (queue.put(layer) if overlap else held.append(layer))
        done["backward"] = env.now
        for layer in held:
            queue.put(layer)
        queue.put(None)

    def communicate():
        while True:
            layer = yield queue.get()
            if layer is None:
                break
            cost = ring_allreduce_time(layer.params * platform.bytes_per_param, nodes, platform.net)
            done["busy"] += cost
            yield env.timeout(cost)
        done["comm"] = env.now

    env.process(compute())
    env.process(communicate())
    env.run()
    return IterationTime(
        forward=fwd,
        backward=done["backward"] - fwd,
        communication=done["busy"],
        total=max(done["backward"], done["comm"]),
    )


def speedup(layers: list[Layer], nodes: int, batch: int, platform: Platform, overlap: bool) -> float:
    """Iteration time on one node over the iteration time on ``nodes`` nodes (same global batch)."""
    one = simulate_iteration(layers, 1, batch, platform, overlap).total
    return one / simulate_iteration(layers, nodes, batch, platform, overlap).total
