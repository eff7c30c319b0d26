"""File domains and request splitting of the two-phase write."""

from __future__ import annotations

import numpy as np
import pytest

from repro.pario import decomp as dc
from repro.pario.twophase import aggregator_ranks, exchange_plan, file_domains, split_by_domain


@pytest.mark.parametrize("start,end,A,stripe", [(0, 100, 3, None), (7, 1000, 4, 64), (5, 6, 3, None),
                                                 (0, 0, 2, None), (100, 5000, 7, 1000)])
def test_domains_disjoint_and_cover(start: int, end: int, A: int, stripe: int | None) -> None:
    doms = file_domains(start, end, A, stripe)
    assert len(doms) == A and doms[0].lo == start and doms[-1].hi == end
    assert all(a.hi == b.lo for a, b in zip(doms, doms[1:]))
    assert all(d.size >= 0 for d in doms)
    if stripe:
        assert all(d.lo % stripe == 0 for d in doms[1:] if start < d.lo < end)


def test_aggregators_distinct() -> None:
    assert aggregator_ranks(13, 4) == [0, 3, 6, 9]
    assert aggregator_ranks(5, 5) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        aggregator_ranks(3, 4)


def test_split_keeps_byte_order() -> None:
    d = dc.irregular_runs(5000, 5, 9, seed=3)
    plan = exchange_plan(d, 3)
    for r, pieces in zip(d.ranks, plan.pieces):
        cat = np.concatenate([dc.expand_offsets(x) for x in pieces])
        assert np.array_equal(cat, dc.expand_offsets(r))
        for dom, x in zip(plan.domains, pieces):
            if x.count:
                assert x.offsets[0] >= dom.lo and x.offsets[-1] + x.lengths[-1] <= dom.hi
    assert plan.counts.sum() == d.file_size


def test_split_refuses_uncovered_requests() -> None:
    r = dc.Requests.from_pairs([0, 50], [10, 10])
    with pytest.raises(ValueError):
        split_by_domain(r, file_domains(0, 40, 2))
