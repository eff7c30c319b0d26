"""Exactness of the schedules on a real MPI, as tables for the chapters.

:func:`algorithm_exactness` runs registry algorithms under ``mpiexec`` (the
``check`` mode of :mod:`repro.collectives.mpi_worker`) and compares
every rank's result with MPI's own ``Allreduce``/``Alltoall``;
:func:`exactness_summary` condenses the cases per algorithm, counting the
cases that ran and those that did not apply, and refuses to summarise an
algorithm of which no case ran.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from repro.collectives.mpi_worker import launch_worker


class ExactnessResults:
    """A chapter ``Results`` mixin: the MPI cases in ``exactness`` and their summary per algorithm."""

    exactness: pd.DataFrame

    @property
    def exactness_summary(self) -> pd.DataFrame:
        """One row per algorithm of the MPI check (:func:`exactness_summary`)."""
        return exactness_summary(self.exactness)


def algorithm_exactness(specs: Sequence[str], nprocs: int, lengths: Sequence[int], dtypes: Sequence[str],
                        seed: int = 0, timeout: float = 120.0) -> pd.DataFrame:
    """Run the schedules of ``specs`` on ``nprocs`` MPI ranks against MPI's own collective.

    Every case compares our result with MPI's ``Allreduce``/``Alltoall`` on
    every rank (exact for integers and all-to-alls, within the summation-order
    bound for floats).

    Parameters
    ----------
    specs:
        Algorithm specs (``"lr_lr:k=4"``).
    nprocs:
        Ranks of the one ``mpiexec`` launch.
    lengths:
        Vector lengths (allreduce) and block lengths (all-to-all), in elements.
    dtypes:
        numpy dtype names.
    seed:
        Seed of the inputs.
    timeout:
        Wall-clock limit of the launch in seconds.

    Returns
    -------
    pandas.DataFrame
        One row per case: ``algorithm, ranks, elements, dtype, equal to MPI``
        (``None`` for a case that does not apply to ``nprocs``), ``max |error|``,
        ``steps``, ``skipped`` (the reason, or ``None``) and ``mpi`` (the library).
    """
    lens = ",".join(map(str, lengths))
    report = launch_worker("check", nprocs, ["--algos", ";".join(specs), "--lengths", lens, "--a2a-lengths", lens,
                                             "--dtypes", ",".join(dtypes), "--seed", str(seed)], timeout=timeout)
    rows = [{"algorithm": c["spec"], "ranks": c["p"], "elements": c["n"], "dtype": c["dtype"],
             "equal to MPI": c["ok"], "max |error|": c.get("max_abs_err"), "steps": c.get("steps"),
             "skipped": c.get("skipped")}
            for c in report["cases"]]
    return pd.DataFrame(rows).assign(mpi=report["mpi_library"])


def exactness_summary(cases: pd.DataFrame) -> pd.DataFrame:
    """One row per algorithm of :func:`algorithm_exactness`'s cases: what ran, what was skipped, whether all matched.

    A case that did not apply (``equal to MPI`` is ``None``) is counted as
    skipped, never as a match.

    Raises
    ------
    ValueError
        If an algorithm had no case that ran (nothing was compared, so nothing
        can be reported as equal to MPI).
    """
    ran = cases["equal to MPI"].notna()
    g = cases.assign(ran=ran, matched=cases["equal to MPI"].eq(True) & ran).groupby("algorithm", sort=False)
    out = pd.DataFrame({
        "ranks": g.ranks.first(),
        "lengths": g.elements.apply(lambda v: ", ".join(map(str, sorted(set(v))))),
        "dtypes": g.dtype.apply(lambda v: ", ".join(dict.fromkeys(v))),
        "cases run": g.ran.sum().astype(int),
        "skipped": (g.size() - g.ran.sum()).astype(int),
        "all equal to MPI": g.matched.sum() == g.ran.sum(),
        "max |error|": g["max |error|"].max(),
        "steps": g.steps.first(),
    }).reset_index()
    none_ran = out.loc[out["cases run"] == 0, "algorithm"].tolist()
    if none_ran:
        raise ValueError(f"no MPI case ran for {none_ran}: every case was skipped as not applicable")
    return out
