"""SimGrid executor: simulated time of a schedule on a :class:`Platform`.

Every rank is an S4U actor on its host.  Per step it posts ``put_async`` for
each send (payload ``None``, simulated size = the message's bytes) and
``get_async`` for each receive, on one mailbox per message, and waits for all
of them; a rank then goes on to its next step without a global barrier (as
the MPI executor does).  Only sizes move: correctness is the job of the
reference and MPI executors.  Reductions optionally cost compute time
(``gamma`` seconds per reduced byte).

The simulation runs in a child process (``python -m
repro.hpc.simgrid``): a SimGrid engine can be created only once
per process, and a crash in the binding must not take the caller down.
Network model: CM02 without cross-traffic and without the TCP-window bound,
so an uncontended message costs ``latency + bytes / bandwidth``.

Requires SimGrid's Python binding (Debian ``python3-simgrid`` 3.32, made
importable by ``envs/simgrid-setup.sh``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pickle
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from repro.hpc.ir import SUM, Schedule
from repro.hpc.platforms import Platform

SIMGRID_CONFIG = ["network/model:CM02", "network/crosstraffic:0", "network/TCP-gamma:0"]


@dataclass(frozen=True, kw_only=True)
class SimResult:
    """Outcome of one simulation.

    Attributes
    ----------
    time:
        Simulated completion time of the collective (s).
    rank_finish:
        Simulated time at which each rank finished.
    wall_s:
        Wall-clock time of the simulation itself.
    """

    time: float
    rank_finish: list[float]
    wall_s: float


def simgrid_available() -> bool:
    """True when ``import simgrid`` would succeed in this interpreter."""
    return importlib.util.find_spec("simgrid") is not None


def simulate(schedule: Schedule, platform: Platform, itemsize: int = 4, *, gamma: float = 0.0,
             placement: Sequence[int] | None = None, timeout: float = 600.0) -> SimResult:
    """Simulate ``schedule`` on ``platform`` and return the simulated time.

    Parameters
    ----------
    schedule:
        The schedule (any kind).
    platform:
        The network; rank ``r`` runs on host ``placement[r]`` (default ``r``).
    itemsize:
        Bytes per element.
    gamma:
        Seconds per reduced byte (0: reductions are free).
    placement:
        Host index of every rank.
    timeout:
        Wall-clock limit for the child process (s).

    Raises
    ------
    RuntimeError
        If SimGrid is missing, the child fails or times out (with its stderr tail).
    """
    placement = list(range(schedule.p)) if placement is None else list(placement)
    if len(placement) != schedule.p or len(set(placement)) != schedule.p:
        raise ValueError("placement must give a distinct host to every rank")
    if max(placement, default=0) >= len(platform.hosts):
        raise ValueError(f"platform has {len(platform.hosts)} hosts, schedule needs {schedule.p}")
    with tempfile.TemporaryDirectory(prefix="repro-simgrid-") as tmp:
        xml, job, out = Path(tmp, "platform.xml"), Path(tmp, "job.pkl"), Path(tmp, "result.json")
        xml.write_text(platform.to_xml())
        hosts = [platform.hosts[h] for h in placement]
        with job.open("wb") as fh:
            pickle.dump({"schedule": schedule, "hosts": hosts, "itemsize": itemsize, "gamma": gamma,
                         "speed": platform.host_speed}, fh)
        cmd = [sys.executable, "-m", "repro.hpc.simgrid", "--platform", str(xml),
               "--job", str(job), "--out", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"SimGrid simulation of {schedule.name} (p={schedule.p}) timed out "
                               f"after {timeout:g} s") from None
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"SimGrid simulation of {schedule.name} (p={schedule.p}) failed with code "
                               f"{proc.returncode}; stderr tail:\n{proc.stderr.strip()[-2000:]}")
        res = json.loads(out.read_text())
    return SimResult(time=res["time"], rank_finish=res["rank_finish"], wall_s=res["wall_s"])


# ----------------------------------------------------------------- child process
def _rank_program(sg: Any, schedule: Schedule, rank: int, itemsize: int, flops_per_byte: float,
                  finish: list[float]) -> None:
    """The actor of one rank: step by step, post every message, wait for all."""
    for s, row in enumerate(schedule.steps):
        st = row[rank]
        if not st.communicates:
            continue
        comms, keep = [], []
        count: dict[int, int] = {}
        for rv in st.recvs:
            k = count[rv.peer] = count.get(rv.peer, -1) + 1
            comm, handle = sg.Mailbox.by_name(f"{s}:{rv.peer}>{rank}:{k}").get_async()
            comms.append(comm)
            keep.append(handle)  # dropping it before wait() crashes SimGrid 3.32
        count = {}
        for sd in st.sends:
            k = count[sd.peer] = count.get(sd.peer, -1) + 1
            nbytes = schedule.blocks_length(sd.blocks) * itemsize
            comms.append(sg.Mailbox.by_name(f"{s}:{rank}>{sd.peer}:{k}").put_async(None, nbytes))
        sg.Comm.wait_all(comms)
        reduced = sum(schedule.blocks_length(rv.blocks) for rv in st.recvs if rv.op == SUM) * itemsize
        if flops_per_byte > 0 and reduced > 0:
            sg.this_actor.execute(reduced * flops_per_byte)
        del keep
    finish[rank] = sg.Engine.clock


def _child(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="run one SimGrid simulation (internal)")
    ap.add_argument("--platform", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    with open(args.job, "rb") as fh:
        job = pickle.load(fh)
    import simgrid as sg

    cfg = [f"--cfg={c}" for c in SIMGRID_CONFIG] + ["--log=root.thresh:warning"]
    engine = sg.Engine([sys.argv[0], *cfg])
    engine.load_platform(args.platform)
    schedule: Schedule = job["schedule"]
    finish = [0.0] * schedule.p
    flops_per_byte = job["gamma"] * job["speed"]
    for r, host in enumerate(job["hosts"]):
        sg.Actor.create(f"rank{r}", engine.host_by_name(host), _rank_program, sg, schedule, r,
                        job["itemsize"], flops_per_byte, finish)
    t0 = time.perf_counter()
    engine.run()
    result = {"time": sg.Engine.clock, "rank_finish": finish, "wall_s": time.perf_counter() - t0}
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
