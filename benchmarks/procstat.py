"""Process figures the reliability scripts sample: resident memory and open descriptors (Linux /proc),
and the Python heap's live blocks."""

from __future__ import annotations

import gc
import os
import sys


def rss_kib(pid: int | None = None) -> int:
    """Resident set size of ``pid`` (default: this process) in KiB; 0 once the process is gone."""
    try:
        with open(f"/proc/{pid or os.getpid()}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def py_blocks() -> int:
    """Python objects' memory blocks alive in this process after a full collection.

    For a fuzzer that runs in the test's own process this is the leak measure that holds on a
    short run: RSS there mostly shows the allocator settling and what earlier tests left behind,
    while a block count grows only by what is still referenced. It sees Python objects only, so
    a native (libzmq) leak still needs the long campaign's RSS figure."""
    gc.collect()
    return sys.getallocatedblocks()


def open_fds(pid: int | None = None) -> int:
    """Number of open file descriptors of ``pid`` (default: this process)."""
    try:
        return len(os.listdir(f"/proc/{pid or os.getpid()}/fd"))
    except FileNotFoundError:
        return 0


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first, Linux /proc): the engines ``ecp serve`` started."""
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except FileNotFoundError:
            kids = []
        out += kids
        todo += kids
    return out


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # the command name (field 2) may contain spaces; the fields after it are split on them
    return raw[raw.rindex(")") + 2:].split()


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every live descendant (Linux /proc): a
    frontend that is several processes (launcher, API servers, a wrapper script) counts whole."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                parent_of[int(entry)] = int(fields[1])
    tree, grew = {pid}, True
    while grew:
        more = {p for p, pp in parent_of.items() if pp in tree and p not in tree}
        tree |= more
        grew = bool(more)
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in tree:
        fields = _stat_fields(p)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / tick
