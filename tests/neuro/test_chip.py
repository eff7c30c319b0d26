"""Neuromorphic chip simulation: partitioned == monolithic, consistent NoC counts, exact ideal devices."""

from __future__ import annotations

import numpy as np
import pytest

from repro.neuro import convert as cv
from repro.neuro.core import DeviceModel, adc, program
from repro.neuro.mapping import NocTiming, TrafficCounter, noc_delay, place, tile_network, xy_route
from repro.neuro.simulate import ChipConfig, build_chip, chip_run, reference_run


@pytest.fixture(scope="module")
def network():
    rng = np.random.default_rng(0)
    sizes = [20, 45, 30, 7]
    weights = tuple(np.round(rng.normal(0, 40, size=(a, b))) for a, b in zip(sizes[:-1], sizes[1:]))
    biases = tuple(np.round(rng.normal(5, 10, size=b)) for b in sizes[1:])
    return cv.SpikingNetwork(weights=weights, biases=biases, threshold=100.0)


@pytest.fixture(scope="module")
def inputs():
    return cv.input_spikes(np.random.default_rng(1).random((6, 20)), ticks=12)


def test_partitioned_chip_equals_the_monolithic_reference(network, inputs):
    ref = reference_run(network, inputs)
    chip = build_chip(network, ChipConfig(axons=8, neurons=16, mesh=(5, 6)), seed=0)
    assert sum(int(s.sum()) for s in ref.spikes) > 0
    for workers in (1, 3):
        run = chip_run(chip, inputs, workers=workers)
        for a, b in zip(run.spikes, ref.spikes):
            assert np.array_equal(a, b)


def test_packets_equal_spikes_times_destination_cores(network, inputs):
    chip = build_chip(network, ChipConfig(axons=8, neurons=16, mesh=(5, 6), placement="random"), seed=3)
    run = chip_run(chip, inputs)
    expected = 0
    for layer, spikes in enumerate(run.spikes[:-1]):
        for cores, lo, hi in chip.destinations(layer + 1):
            expected += int(spikes[:, :, lo:hi].sum()) * len(cores)
    assert run.spike_packets == expected == run.expected_spike_packets
    assert run.link_traversals == run.hops and run.hops > 0


def test_hops_are_manhattan_distances():
    coords = place(6, (3, 3), "random", seed=2)
    counter = TrafficCounter(coords=coords)
    counter.add(0, np.array([1, 5]), 3)
    counter.add(4, np.array([0]), 2)
    manhattan = lambda a, b: int(np.abs(coords[a] - coords[b]).sum())  # noqa: E731
    assert counter.hops == 3 * manhattan(0, 1) + 3 * manhattan(0, 5) + 2 * manhattan(4, 0)
    assert sum(counter.link_loads().values()) == counter.hops
    for (sx, sy), (dx, dy) in [((0, 0), (2, 3)), ((3, 1), (0, 0)), ((1, 1), (1, 1))]:
        route = xy_route((sx, sy), (dx, dy))
        assert len(route) == abs(dx - sx) + abs(dy - sy)
        assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in route)


def test_tiles_cover_every_synapse_once():
    sizes = [64, 100, 10]
    tiles = tile_network(sizes, 32, 32)
    for layer, (fi, fo) in enumerate(zip(sizes[:-1], sizes[1:])):
        cover = np.zeros((fi, fo), dtype=int)
        for t in tiles:
            if t.layer == layer:
                assert t.in_hi - t.in_lo <= 32 and t.out_hi - t.out_lo <= 32
                cover[t.in_lo:t.in_hi, t.out_lo:t.out_hi] += 1
        assert (cover == 1).all()
    with pytest.raises(ValueError):
        place(17, (4, 4))


def test_ideal_devices_are_exact_and_constrained_ones_are_not():
    w = np.round(np.random.default_rng(0).normal(0, 50, size=(16, 8)))
    rng = np.random.default_rng(0)
    assert np.array_equal(program(w, DeviceModel(), rng), w)
    assert np.array_equal(adc(w, DeviceModel(), 100.0), w)
    assert not np.array_equal(program(w, DeviceModel(levels=4), rng), w)
    assert not np.array_equal(program(w, DeviceModel(sigma=0.1), rng), w)
    q = program(w, DeviceModel(levels=5), rng)
    assert len(np.unique(np.abs(q))) <= 3


def test_constraints_change_the_spikes(network, inputs):
    ref = reference_run(network, inputs)
    chip = build_chip(network, ChipConfig(axons=8, neurons=16, mesh=(5, 6), device=DeviceModel(levels=3)), seed=0)
    run = chip_run(chip, inputs)
    assert any(not np.array_equal(a, b) for a, b in zip(run.spikes, ref.spikes))


def test_rate_coding_and_integer_conversion():
    spikes = cv.input_spikes(np.array([[0.0, 0.25, 1.0]]), ticks=8)
    assert spikes[:, 0].sum(axis=0).tolist() == [0, 2, 8]


def test_random_networks_are_reproducible_and_fire_sparsely():
    from repro.neuro import synthetic

    net = synthetic.random_network([256, 256, 256], 0.05, seed=2)
    assert net.sizes == [256, 256, 256]
    again = synthetic.random_network([256, 256, 256], 0.05, seed=2)
    assert all(np.array_equal(a, b) for a, b in zip(net.weights, again.weights))
    assert all(np.array_equal(w, np.round(w)) for w in net.weights)
    x = synthetic.poisson_inputs(20, 4, 256, 0.05, seed=2)
    assert 0.03 < x.mean() < 0.07
    rates = [s.mean() for s in reference_run(net, x).spikes]
    assert all(0.0 < r < 0.2 for r in rates)
    with pytest.raises(ValueError):
        synthetic.random_network([10], 0.1, 0)
    with pytest.raises(ValueError):
        synthetic.random_network([10, 10], 0.0, 0)


def test_relocated_traffic_keeps_packets_and_recounts_hops(network, inputs):
    chip = build_chip(network, ChipConfig(axons=8, neurons=16, mesh=(5, 6)), seed=0)
    run = chip_run(chip, inputs)
    coords = place(len(chip.tiles), (5, 6), "random", seed=4)
    moved = run.traffic.relocated(coords)
    assert moved.packets == run.traffic.packets and moved.hops != run.traffic.hops
    manhattan = np.abs(coords[:, None, :] - coords[None, :, :]).sum(-1)
    assert moved.hops == int((run.traffic.pairs * manhattan).sum())
    assert sum(moved.link_loads().values()) == moved.hops
    with pytest.raises(ValueError):
        run.traffic.relocated(coords[:-1])


def test_first_order_noc_delay_from_hops_and_link_loads():
    coords = np.array([[0, 0], [3, 0], [3, 2]])
    traffic = TrafficCounter(coords=coords)
    traffic.add(0, np.array([1]), 7)  # 3 hops
    traffic.add(0, np.array([2]), 2)  # 5 hops: the longest route
    assert traffic.longest_route == 5
    busiest = max(traffic.link_loads().values())
    assert busiest == 9  # the link out of core 0 carries both flows
    timing = NocTiming(router_cycles=3.0, link_cycles=1.0, packet_cycles=2.0, clock_mhz=500.0)
    d = noc_delay(traffic, busiest, ticks=2, inputs=2, timing=timing)
    assert d.route_cycles == 5 * (3 + 1)
    assert d.serialisation_cycles == 3 * 2.0  # ceil(9 packets / (2 ticks x 2 inputs)) one after another
    assert d.cycles_per_tick == 26.0
    assert d.microseconds_per_input == pytest.approx(26.0 * 2 / 500.0)
    assert TrafficCounter(coords=coords).longest_route == 0
