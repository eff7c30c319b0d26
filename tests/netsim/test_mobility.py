"""The road-grid city: trajectories stay on roads, RSU placement, KD-tree queries against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from repro.netsim.mobility import (
    CitySpec,
    CoverageIndex,
    generate_fleet,
    nearest_neighbours,
    place_rsus,
    poisson_road_traffic,
)

SPEC = CitySpec(grid=11, buses=6, taxis=3, routes=3, horizon_s=600.0)


def test_fleet_shape_and_seeding():
    a, b = generate_fleet(SPEC, 3), generate_fleet(SPEC, 3)
    assert a.positions.shape == (600, 9, 2)
    np.testing.assert_array_equal(a.positions, b.positions)
    assert not np.array_equal(a.positions, generate_fleet(SPEC, 4).positions)
    assert a.is_bus.sum() == 6 and (a.route_of[:6] >= 0).all() and (a.route_of[6:] == -1).all()


def test_vehicles_stay_on_the_road_grid():
    pos = generate_fleet(SPEC, 0).positions.astype(float)
    assert pos.min() >= -1e-3 and pos.max() <= SPEC.side_m + 1e-3
    on_x = np.isclose(np.mod(pos[..., 0] + 1e-3, SPEC.block_m), 1e-3, atol=1e-2)
    on_y = np.isclose(np.mod(pos[..., 1] + 1e-3, SPEC.block_m), 1e-3, atol=1e-2)
    assert (on_x | on_y).all(), "every position lies on a street"


def test_vehicle_speed_bounded():
    fleet = generate_fleet(SPEC, 1)
    step = np.linalg.norm(np.diff(fleet.positions.astype(float), axis=0), axis=2)
    # grid streets: the straight-line step never exceeds the path travelled in one second
    assert step.max() <= SPEC.speed_max * SPEC.dt + 1e-3


def test_buses_stop():
    fleet = generate_fleet(SPEC, 2)
    step = np.linalg.norm(np.diff(fleet.positions[:, :6].astype(float), axis=0), axis=2)
    assert ((step < 1e-6).mean(axis=0) > 0.1).all(), "each bus dwells at stops"


def test_rsu_placement_centre_share():
    spec = CitySpec(grid=31)
    xy = place_rsus(spec, 24, seed=0, centre_share=2 / 3, centre_side_m=1000.0)
    assert len({tuple(p) for p in xy}) == 24
    centre = np.all(np.abs(xy - spec.side_m / 2) <= 500.0, axis=1)
    assert centre.sum() == 16
    with pytest.raises(ValueError):
        place_rsus(spec, 3, seed=0, centre_share=1.5)


def test_coverage_matches_brute_force():
    rng = np.random.default_rng(0)
    stations, pts = rng.uniform(0, 1000, (15, 2)), rng.uniform(0, 1000, (200, 2))
    cov = CoverageIndex(stations, 120.0)
    d = np.linalg.norm(pts[:, None] - stations[None], axis=2)
    np.testing.assert_array_equal(cov.covered(pts), d.min(axis=1) <= 120.0)
    np.testing.assert_array_equal(cov.count_in_range(pts), (d <= 120.0).sum(axis=1))
    np.testing.assert_array_equal(cov.nearest(pts)[1], d.argmin(axis=1))


def test_nearest_neighbours_match_brute_force():
    rng = np.random.default_rng(1)
    pts = rng.uniform(0, 500, (40, 2))
    nb, count = nearest_neighbours(pts, 60.0)
    d = np.linalg.norm(pts[:, None] - pts[None], axis=2)
    np.fill_diagonal(d, np.inf)
    expect = np.where(d.min(axis=1) <= 60.0, d.argmin(axis=1), -1)
    np.testing.assert_array_equal(nb, expect)
    np.testing.assert_array_equal(count, (d <= 60.0).sum(axis=1))


def test_road_traffic_is_in_steady_state():
    traffic = poisson_road_traffic(2.0, 2000.0, 300.0, 15.0, 25.0, np.random.default_rng(0))
    counts = [traffic.on_road(t).sum() for t in (0.0, 150.0, 299.0)]
    expected = 2.0 * 2000.0 * np.mean(1 / np.random.default_rng(1).uniform(15, 25, 100000))
    assert all(abs(c - expected) < 5 * np.sqrt(expected) for c in counts)
