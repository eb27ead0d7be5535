"""Other work on the machine while a benchmark runs: measured, recorded, and never hidden.

With both cores of a 2-core machine busy elsewhere, a 2-thread GEMM of 2+ rows ran many times
slower while a 1-row one was untouched: contention penalises every multi-token forward, that is every
speculative method, against plain decoding. So the benchmark measures, per prompt, the CPU time
that *other* processes used (the machine's busy time from /proc/stat minus this process's own),
as a share of the machine's capacity over that interval, and marks results taken under load. On a
virtual machine the time the hypervisor gave to other machines (`steal`) counts as other work too:
this process waited for its CPUs just the same.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

# Other processes using more than this share of the machine's CPUs make a result "contended".
CONTENDED_SHARE = 0.10


def _machine_busy_s() -> tuple[float, int] | None:
    """CPU seconds every process on the machine has used since boot, with the seconds the hypervisor
    took from its CPUs, and the number of CPUs they are counted over (None where /proc is absent)."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
        fields = [int(v) for v in lines[0].split()[1:9]]  # user nice system idle iowait irq softirq steal
        cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    except (OSError, ValueError, IndexError):
        return None
    busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK"), cpus


_HELPERS: set[int] = set()  # processes a benchmark started (an engine's server): their CPU time is its own


def count_as_own(pid: int, *, forget: bool = False) -> None:
    """Count process `pid`'s CPU time as this process's own (or stop counting it) in `other_share`."""
    (_HELPERS.discard if forget else _HELPERS.add)(pid)


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # after the command name, which may hold spaces
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _own_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + sum(_cpu_s(p) for p in _HELPERS)


@dataclass(frozen=True)
class LoadMark:
    wall: float
    busy: tuple[float, int] | None  # (machine busy seconds, CPUs)
    own: float


def mark() -> LoadMark:
    return LoadMark(time.perf_counter(), _machine_busy_s(), _own_s())


def other_share(start: LoadMark, end: LoadMark | None = None) -> float:
    """The share of the machine's CPU capacity other processes used between two marks (NaN: unknown)."""
    end = end or mark()
    wall = end.wall - start.wall
    if start.busy is None or end.busy is None or wall <= 0:
        return float("nan")
    others = (end.busy[0] - start.busy[0]) - (end.own - start.own)
    return max(0.0, others) / (wall * end.busy[1])
