"""The chapters' MPI exactness tables.

Every case that ran is counted, skipped cases never count as a match, and a summary in which an algorithm ran
no case is refused.
"""

from __future__ import annotations

import pandas as pd
import pytest

from repro.collectives.exactness import algorithm_exactness, exactness_summary


def _cases(rows: list[tuple[str, int, object]]) -> pd.DataFrame:
    return pd.DataFrame([{"algorithm": a, "ranks": 4, "elements": n, "dtype": "int64", "equal to MPI": ok,
                          "max |error|": 0.0 if ok is not None else None, "steps": 3} for a, n, ok in rows])


def test_summary_counts_cases_run_and_skipped() -> None:
    table = exactness_summary(_cases([("ring", 1, True), ("ring", 7, True), ("lr_lr:k=2", 1, True),
                                      ("lr_lr:k=2", 7, None), ("bruck", 1, False)])).set_index("algorithm")
    assert table.loc["ring", "cases run"] == 2 and table.loc["ring", "skipped"] == 0
    assert table.loc["lr_lr:k=2", "cases run"] == 1 and table.loc["lr_lr:k=2", "skipped"] == 1
    assert bool(table.loc["ring", "all equal to MPI"]) and bool(table.loc["lr_lr:k=2", "all equal to MPI"])
    assert not bool(table.loc["bruck", "all equal to MPI"])


def test_summary_refuses_an_algorithm_with_no_case_run() -> None:
    """All cases skipped is not "all equal to MPI": nothing was compared."""
    with pytest.raises(ValueError, match="no MPI case ran for \\['lr_lr:k=3'\\]"):
        exactness_summary(_cases([("ring", 1, True), ("lr_lr:k=3", 1, None), ("lr_lr:k=3", 7, None)]))


def test_algorithm_exactness_on_real_mpi() -> None:
    """One launch of 4 ranks: every case of every spec equals MPI's own collective.

    A spec whose node size does not divide the rank count is skipped and counted, not passed.
    """
    got = algorithm_exactness(["lr_lr:k=2", "2dfc:rows=2", "rabenseifner", "lr_rab:k=3"], 4, [1, 7, 100], ["int64"],
                              timeout=120)
    assert len(got) == 12 and set(got.algorithm) == {"lr_lr:k=2", "2dfc:rows=2", "rabenseifner", "lr_rab:k=3"}
    ran = got[got["equal to MPI"].notna()]
    assert len(ran) == 9 and ran["equal to MPI"].eq(True).all()
    assert got[got.algorithm == "lr_rab:k=3"].skipped.str.contains("does not divide").all()
    with pytest.raises(ValueError, match="lr_rab:k=3"):
        exactness_summary(got)
    table = exactness_summary(got[got.algorithm != "lr_rab:k=3"])
    assert table["cases run"].tolist() == [3, 3, 3] and table["all equal to MPI"].all()
