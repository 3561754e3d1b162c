"""The JSON-lines event log (``--events FILE``).

One JSON object per line, each with ``t`` (seconds since start) and ``event``:

* ``start`` / ``stop``: the monitor's configuration and the final counts;
* ``engine_handshake``: an engine's HELLO arrived (``rank``, ``identity``);
* ``init_rewritten``: the addresses the engine was given instead (``original``, ``rewritten``),
  or ``init_not_rewritten`` with the reason (its traffic then bypasses the monitor);
* ``ready_response_restored``: an engine's ready payload echoed the relay's coordinator
  addresses and was given the frontend's back;
* ``engine_gone``: an engine's input connection closed;
* ``frontend_gone``: the frontend's input socket for an engine closed (``rank``, ``client``);
* ``violation``: a finding (clause, level, message, direction, rank, socket, seq, request id);
* ``relay_drop``: a message the monitor could not deliver (peer not connected);
* ``fail_closed``: relaying stopped after a MUST violation (``--fail-closed``);
* ``stats``: a periodic snapshot of the counters (with the console);
* ``message``: every relayed message (kind, sizes), only with ``--log-messages``;
* ``monitor_error``: a bug in the monitor itself (relaying continues).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, IO


class EventLog:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._f: IO[str] = open(self.path, "w", encoding="utf-8", buffering=1 << 16)
        self._lock = threading.Lock()

    def write(self, t: float, event: str, /, **fields: Any) -> None:
        line = json.dumps({"t": round(t, 6), "event": event, **fields}, default=str, ensure_ascii=False)
        with self._lock:
            if not self._f.closed:
                self._f.write(line + "\n")

    def flush(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.flush()

    def close(self) -> None:
        with self._lock:
            self._f.close()
