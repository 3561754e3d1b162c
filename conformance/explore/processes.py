"""Which OS process runs a rank of a launched peer, and the signals a process fault sends it.

A command peer runs in a session of its own (the launch starts it with ``start_new_session``), so
its processes are those of that session. A rank's process is the one whose command line names
that rank alone -- ``--engine-start-index K`` with ``--engine-count 1`` (a per-rank process of
``ecp engine``) or a title ``EngineCore_DPK`` (vLLM's engine core processes) -- and otherwise the
peer's own process, which then runs every rank (``--in-process``, or one rank): stopping or
killing it stops or kills them all. Among several processes naming the rank (a child forked
from the rank's process keeps its command line) the one whose parent does not name it is taken.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from ..launch import CommandPeer, PeerHandle

_VLLM_TITLE = re.compile(r"EngineCore_DP(\d+)")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of ``pid``; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the name in parentheses may hold spaces
    return int(fields[1]), int(fields[3])


def _names_rank(argv: list[str]) -> int | None:
    """The one rank a command line says its process runs, or None."""
    for arg in argv:
        m = _VLLM_TITLE.search(arg)
        if m:
            return int(m.group(1))
    opts = dict(zip(argv, argv[1:]))
    if opts.get("--engine-count") == "1" and "--engine-start-index" in opts:
        try:
            return int(opts["--engine-start-index"])
        except ValueError:
            return None
    return None


def rank_process(handle: PeerHandle | None, rank: int) -> int | None:
    """The pid of the process that runs global rank ``rank`` of ``handle``'s peer; None when the
    peer is not a command the harness launched, or it is gone."""
    if not isinstance(handle, CommandPeer) or not handle.alive():
        return None
    root = handle.proc.pid
    naming: dict[int, int] = {}  # pid -> parent pid, of the processes that name the rank
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        st = _stat(pid)
        if st is None or st[1] != root:
            continue
        if _names_rank(_cmdline(pid)) == rank:
            naming[pid] = st[0]
    heads = sorted(pid for pid, parent in naming.items() if parent not in naming)
    return heads[0] if heads else root


def send(pid: int, signum: signal.Signals) -> bool:
    """Send ``signum`` to ``pid``; False when the process is already gone."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True
