"""Process figures the reliability scripts sample: resident memory and open descriptors (Linux /proc)."""

from __future__ import annotations

import os


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


def open_fds(pid: int | None = None) -> int:
    """Number of open file descriptors of ``pid`` (default: this process)."""
    try:
        return len(os.listdir(f"/proc/{pid or os.getpid()}/fd"))
    except FileNotFoundError:
        return 0
