"""Other papers: K-means step throughput per numba layout against scikit-learn, and the real-time analysis.

Also the component-model analysis and the simpy simulation per design.

Rows: seconds per Lloyd step (200,000 points, K = 16, D = 16 aligned and D = 17 unaligned, one numba
thread and then all threads) with the throughput in million point-centroid distances per second and the
ratio to scikit-learn's one-iteration ``KMeans.fit`` on the same data and centroids; seconds to build the
three thread designs of a 200-action random component model and to simulate each on 8 processors.
Timings live here, never in the tests.
"""

from __future__ import annotations

import numba
import numpy as np
from timing import timed

from repro.misc import kmeans as km
from repro.misc import realtime as rt

N, K = 200_000, 16


def _kmeans_rows(d: int, threads: int) -> list[tuple[str, float, str]]:
    data = km.make_dataset(N, d, K, seed=0)
    numba.set_num_threads(threads)
    sk = km.time_sklearn_step(data, repeats=3)
    rows = [(f"misc: K-means step, scikit-learn (D={d})", sk, f"{N * K / sk / 1e6:.0f} M dist/s")]
    for v in km.standard_variants():
        packed = km.pack(data.points, v, km.HOST_LANES)
        sec = km.time_step(data.points, packed, data.init, repeats=5)
        rows.append((f"misc: K-means step, {v.label} (D={d}, {threads} thr)", sec,
                     f"{N * K / sec / 1e6:.0f} M dist/s, {sk / sec:.1f}x scikit-learn"))
    return rows


def _realtime_rows() -> list[tuple[str, float, str]]:
    g = rt.precedence_graph(rt.random_system(200, 5, 20, 0.15, 0.2, np.random.default_rng(0)), loop_chunks=4)
    rows = [("misc: chain cover of a 200-action model", timed(lambda: rt.thread_design(g, "chains")),
             f"{g.number_of_nodes()} actions, width {rt.width(g)}")]
    for name in rt.DESIGNS:
        design = rt.thread_design(g, name)
        sec = timed(lambda: rt.simulate(design.graph, 8))
        rows.append((f"misc: simpy simulation, {name}, m=8", sec, f"{g.number_of_nodes() / sec:.0f} actions/s"))
    return rows


def run() -> list[tuple[str, float, str]]:
    """Rows ``(name, seconds, throughput and ratio)``."""
    previous = numba.get_num_threads()
    rows = []
    try:
        for d in (16, 17):
            for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
                rows += _kmeans_rows(d, threads)
    finally:
        numba.set_num_threads(previous)
    return rows + _realtime_rows()


if __name__ == "__main__":
    for name, sec, ratio in run():
        print(f"{name:<60} {sec:9.5f}  {ratio}")
