"""Starting and stopping the peer under test (role-neutral).

Three launch modes:

* :class:`CommandPeer` -- the harness runs a command template after filling in
  placeholders (``{handshake_address}``, ``{engine_count}`` …), captures its
  stdout+stderr into a log file for the report, and kills its process group
  at the end;
* :class:`AttachedPeer` -- the user started the peer (e.g. under a debugger);
  the harness only binds and waits, and cannot restart it;
* :class:`AdapterPeer` -- an in-process Python adapter ``module:function``,
  called with the role's arguments: an engine's ``function(handshake_address,
  engine_count)`` (plus ``engine_start_index=K`` when K is not 0 and the
  function takes that keyword), a frontend's ``function(argv)`` (its command
  line's arguments, placeholders filled in); it returns an object with
  ``.stop()`` (and optionally ``.alive()``, ``.exit_status()``, ``.wait(timeout)``,
  ``.frozen()``).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import weakref
from pathlib import Path
from typing import Any, Mapping, Sequence

from .interrupts import deferred, on_last_resort

STDERR_TAIL_BYTES = 16 * 1024

#: how long a process the peer started, still running once the peer's own group is gone, gets after
#: SIGTERM before SIGKILL, and how long the harness then waits for it to be gone
ORPHAN_GRACE_S = 1.0
ORPHAN_KILL_WAIT_S = 2.0
#: at most this many scan-and-stop rounds freeze a peer's family before a SIGKILL (:meth:`CommandPeer._freeze`)
FREEZE_ROUNDS = 8


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time in clock ticks) of every live process, from ``/proc`` (Linux);
    empty where there is none. The start time tells a process from a later one given the same pid."""
    table: dict[int, tuple[int, str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                text = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
        if fields[0] not in ("Z", "X"):
            table[int(name)] = (int(fields[1]), fields[19])
    return table


def descendants(pid: int, table: Mapping[int, tuple[int, str]] | None = None) -> dict[int, str]:
    """Every live process below ``pid`` (children, theirs, …): pid -> start time."""
    table = _process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    out: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        if p not in out:
            out[p] = table[p][1]
            todo += children.get(p, [])
    return out


def _wait_gone(pids: Sequence[int], timeout: float) -> None:
    """Wait until none of ``pids`` (not our children: no wait() for them) runs, at most ``timeout``.
    A pidfd becomes readable when its process exits; without pidfds (not Linux), /proc is polled."""
    import select

    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except (AttributeError, OSError):
            continue
    deadline = time.monotonic() + timeout
    try:
        pending = list(fds)
        while pending and time.monotonic() < deadline:
            ready, _, _ = select.select(pending, [], [], max(0.0, deadline - time.monotonic()))
            pending = [fd for fd in pending if fd not in ready]
    finally:
        for fd in fds:
            os.close(fd)


#: every command peer started and not yet stopped: the last resort of an interrupt kills them
_LIVE: "weakref.WeakSet[CommandPeer]" = weakref.WeakSet()


def _kill_live_peers() -> None:
    """SIGKILL every command peer not stopped yet, and every process it started (the harness is about
    to exit without its own cleanup: :func:`.interrupts.on_last_resort`)."""
    for peer in list(_LIVE):
        peer.kill_now()


on_last_resort(_kill_live_peers)
# whatever path the harness takes to its exit, no peer it started outlives it (the stops above are the
# rule; this catches a peer whose owner was cut off by an interrupt before it held the handle)
atexit.register(_kill_live_peers)


class LaunchError(Exception):
    """The peer could not be started (a harness/usage error, exit 2)."""


def fill_template(command: Sequence[str], values: Mapping[str, Any]) -> list[str]:
    """Replace ``{name}`` placeholders in each argument; unknown ``{…}`` text is left as is
    (commands may legitimately contain braces, e.g. JSON arguments)."""
    out = []
    for arg in command:
        for name, value in values.items():
            arg = arg.replace("{" + name + "}", str(value))
        out.append(arg)
    return out


class PeerHandle:
    """What the harness needs from a running peer."""

    restartable = True
    log_path: Path | None = None
    #: whether :meth:`frozen` holds the peer (a process the harness started, an adapter that can)
    can_freeze = False

    @contextlib.contextmanager
    def frozen(self):
        """Hold the peer for the body, then let it go on (nothing where it cannot be: ``can_freeze``)."""
        yield

    def alive(self) -> bool:
        return True

    def exit_status(self) -> int | None:
        return None

    def wait(self, timeout: float) -> int | None:
        """Wait at most ``timeout`` for the peer to exit; its exit status, or None if it still runs
        (or cannot be watched)."""
        return self.exit_status()

    def stop(self, grace_s: float = 3.0) -> None:
        """Stop the peer; a process gets ``grace_s`` after SIGTERM before SIGKILL."""

    def stall_detail(self) -> str:
        """Where a peer that sent nothing is stuck, when the harness can see it (in-process
        adapters); empty otherwise."""
        return ""

    def terminate(self) -> bool:
        """Ask the peer to shut down gracefully (SIGTERM), without waiting or killing; False when this
        kind of peer has no process the harness can signal."""
        return False

    def log_tail(self, limit: int = STDERR_TAIL_BYTES) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")


class CommandPeer(PeerHandle):
    can_freeze = True   # its process group: SIGSTOP, SIGCONT

    def __init__(self, command: Sequence[str], values: Mapping[str, Any], log_path: Path,
                 env: Mapping[str, str] | None = None) -> None:
        if not command:
            raise LaunchError("no command given after --")
        self.argv = fill_template(command, values)
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self._log.write(f"$ {' '.join(self.argv)}\n".encode())
        self._log.flush()
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                start_new_session=True, env={**os.environ, **(env or {})},
            )
        except OSError as exc:
            self._log.close()
            raise LaunchError(f"cannot start {self.argv[0]!r}: {exc}") from exc
        #: the processes the peer started (pid -> start time), as last seen: its group's SIGKILL does not
        #: reach one that moved to a group or session of its own, nor one orphaned when the peer died
        self.family: dict[int, str] = {}
        self._stopped = False
        _LIVE.add(self)

    def note_family(self) -> None:
        """Record the processes the peer runs now (after its start-up, and before it is stopped), so that
        :meth:`stop` finds them even once they are orphaned."""
        if self.proc.poll() is None:
            self.family.update(descendants(self.proc.pid))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_status(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 3.0) -> None:
        """SIGTERM the process group we created, then SIGKILL it after ``grace_s``; then stop every
        process the peer started that is still running outside that group (:attr:`family`: SIGTERM,
        SIGKILL after :data:`ORPHAN_GRACE_S`). Bounded: at most ``grace_s`` + 5 s +
        :data:`ORPHAN_GRACE_S` + :data:`ORPHAN_KILL_WAIT_S`. An interrupt (:mod:`.interrupts`) does not
        cut it short: it is raised once the peer is stopped."""
        if self._stopped:
            return
        with deferred():
            self.note_family()
            if self.proc.poll() is None:
                self._signal(signal.SIGTERM)
                try:
                    self.proc.wait(grace_s)
                except subprocess.TimeoutExpired:
                    self._freeze()
                    self._signal(signal.SIGKILL)
                    try:
                        self.proc.wait(5)
                    except subprocess.TimeoutExpired:
                        pass  # unkillable (uninterruptible sleep): nothing more can be done
            else:
                # the leader is gone; make sure children it left in its group go too
                self._signal(signal.SIGKILL)
            self._stop_family()
            self._log.close()
            _LIVE.discard(self)
            self._stopped = True

    def _freeze(self) -> None:
        """SIGSTOP the peer's group and every process it started, then record them all (:attr:`family`).

        A running peer can start a process between a scan of its descendants and the SIGKILL that
        follows (one still starting up); that process would outlive it. Frozen processes start
        nothing, so the scan that follows the freeze is complete. Bounded: each round stops the
        processes the previous scan found; a round that finds none new ends it."""
        if self.proc.poll() is None:
            self._signal(signal.SIGSTOP)
        self.note_family()
        stopped: set[int] = set()
        for _ in range(FREEZE_ROUNDS):
            alive = self._family_alive()
            new = set(alive) - stopped
            if not new:
                return
            for pid in new:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
            stopped |= new
            self.family.update(alive)

    def _family_alive(self) -> dict[int, str]:
        """The recorded processes still running (same pid and start time), with what they started since."""
        table = _process_table()
        alive = {pid: st for pid, st in self.family.items() if pid in table and table[pid][1] == st}
        for pid in list(alive):
            alive.update(descendants(pid, table))
        return alive

    def _stop_family(self) -> None:
        for sig, wait in ((signal.SIGTERM, ORPHAN_GRACE_S), (signal.SIGKILL, ORPHAN_KILL_WAIT_S)):
            alive = self._family_alive()
            if not alive:
                return
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
                    if sig == signal.SIGTERM:
                        os.kill(pid, signal.SIGCONT)  # one frozen by _freeze handles its SIGTERM now
            _wait_gone(list(alive), wait)

    def kill_now(self) -> None:
        """SIGKILL the peer's group and every process it started, without waiting: the harness is
        exiting at once (:func:`_kill_live_peers`)."""
        if self._stopped:
            return
        self._freeze()
        if self.proc.poll() is None:  # (a reaped leader's group id may belong to another process by now)
            self._signal(signal.SIGKILL)
        for pid in self._family_alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def terminate(self) -> bool:
        """SIGTERM the process group we created; the caller waits for the exit (:meth:`wait`)."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
        return True

    @contextlib.contextmanager
    def frozen(self):
        """Stop the process group (SIGSTOP) for the body, then continue it (SIGCONT).

        Lets a caller make many changes that the peer then sees in one batch
        (a crowd of disconnects reaching its event loop at once). Does nothing
        once the process has exited.
        """
        if self.proc.poll() is not None:
            yield
            return
        self._signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # the group we created with start_new_session
        except (ProcessLookupError, PermissionError):
            pass


class AttachedPeer(PeerHandle):
    restartable = False

    def __init__(self, address: str) -> None:
        self.address = address


class AdapterPeer(PeerHandle):
    def __init__(self, spec: str, *call_args: Any, engine_start_index: int = 0) -> None:
        module_name, _, func_name = spec.partition(":")
        if not module_name or not func_name:
            raise LaunchError(f"--adapter wants module:function, got {spec!r}")
        try:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            func = getattr(importlib.import_module(module_name), func_name)
        except (ImportError, AttributeError) as exc:
            raise LaunchError(f"cannot load adapter {spec!r}: {exc}") from exc
        kwargs = {}
        if engine_start_index:
            import inspect

            params = inspect.signature(func).parameters
            if "engine_start_index" not in params and not any(
                    p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
                raise LaunchError(f"adapter {spec!r} takes no engine_start_index; --engine-start-index "
                                  f"{engine_start_index} cannot be honoured")
            kwargs["engine_start_index"] = engine_start_index
        before = set(threading.enumerate())
        try:
            self.obj = func(*call_args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any adapter failure is a launch failure
            raise LaunchError(f"adapter {spec!r} failed to start: {exc!r}") from exc
        #: the threads the adapter started (its engines, when it runs them in this process)
        self.threads = [t for t in threading.enumerate() if t not in before]
        if not callable(getattr(self.obj, "stop", None)):
            raise LaunchError(f"adapter {spec!r} returned {type(self.obj).__name__} without .stop()")

    def alive(self) -> bool:
        probe = getattr(self.obj, "alive", None)
        return bool(probe()) if callable(probe) else True

    @property
    def can_freeze(self) -> bool:  # type: ignore[override]
        return callable(getattr(self.obj, "frozen", None))

    def frozen(self):
        """The adapter's own ``frozen()`` (holding what it runs in this process), where it has one."""
        return self.obj.frozen() if self.can_freeze else super().frozen()

    def exit_status(self) -> int | None:
        status = getattr(self.obj, "exit_status", None)
        return status() if callable(status) else None

    def wait(self, timeout: float) -> int | None:
        wait = getattr(self.obj, "wait", None)
        return wait(timeout) if callable(wait) else self.exit_status()

    def stall_detail(self) -> str:
        """The innermost frames of each thread the adapter started, so that an engine that never
        said HELLO shows where it waits."""
        frames = sys._current_frames()
        lines = []
        for t in self.threads:
            frame = frames.get(t.ident) if t.is_alive() else None
            if frame is None:
                lines.append(f"thread {t.name}: exited")
                continue
            stack = traceback.extract_stack(frame)[-3:]
            where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(stack))
            lines.append(f"thread {t.name}: {where}")
        return "; ".join(lines)

    def stop(self, grace_s: float = 3.0) -> None:
        self.obj.stop()
