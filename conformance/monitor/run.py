"""Wiring for ``ecp monitor``: a live session (relay) or a replay, and the report at exit."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from ecp.spec.layout.model import LayoutError

from .capture import CaptureError, CaptureEvent, CaptureWriter, read_capture
from .console import Console
from .eventlog import EventLog
from .relay import Relay, RelayError
from .releases import ReleaseValidator, judging, resolve_side
from .report import MonitorReport
from .session import Session
from .transcripts import TranscriptWriter
from .validator import make_validator


def _validator(args: argparse.Namespace) -> ReleaseValidator:
    """The validator ``--validator`` names, judging each side as its release speaks
    (raises ``LayoutError`` for a release reference that names no layout)."""
    both = getattr(args, "vllm", None)
    frontend = resolve_side("frontend", getattr(args, "frontend_vllm", None) or both)
    engine = resolve_side("engine", getattr(args, "engine_vllm", None) or both)
    judged = judging(frontend, engine)
    return ReleaseValidator(make_validator(args.validator, judged), frontend, engine, judged)


def _session(args: argparse.Namespace, clock=None, record: bool = True) -> Session:
    return Session(
        _validator(args),
        capture=CaptureWriter(args.record) if record and getattr(args, "record", None) else None,
        events=EventLog(args.events) if args.events else None,
        transcripts=TranscriptWriter(args.transcripts, args.max_transcripts) if args.transcripts else None,
        log_messages=args.log_messages, clock=clock)


def _finish(args: argparse.Namespace, session: Session, target: str, duration_s: float,
            problems: list[str]) -> int:
    session.close()
    report = MonitorReport(session, target, strict=args.strict, duration_s=duration_s, problems=problems)
    report.write(json_path=args.report_json, markdown_path=args.report_md, junit_path=args.junit_xml)
    if session.events is not None:
        session.events.write(duration_s, "stop", exit_code=report.exit_code, **report.snapshot.to_json())
        session.events.close()
    if not args.quiet:
        report.write_console(sys.stderr)
    return report.exit_code


def live(args: argparse.Namespace) -> int:
    try:
        session = _session(args)
    except OSError as exc:
        return _fail(f"cannot open an output file: {exc}")
    except LayoutError as exc:
        return _fail(f"--vllm: {exc}")
    if args.max_engines < 1 or args.max_clients < 1:
        session.close()
        return _fail("--max-engines and --max-clients must be at least 1")
    relay = Relay(args.listen, args.frontend, session, relay_host=args.relay_host, fail_closed=args.fail_closed,
                  max_engines=args.max_engines, max_clients=args.max_clients)
    try:
        bound = relay.start()
        server = None
        if args.metrics_port is not None:
            from .metrics import start_prometheus

            server = start_prometheus(session.metrics, session.clock, args.metrics_host, args.metrics_port)
    except (RelayError, ImportError, OSError) as exc:
        relay.close()
        session.close()
        if isinstance(exc, ImportError):
            return _fail("--metrics-port needs prometheus-client (pip install 'engine-core-protocol[serve]')")
        if isinstance(exc, OSError):
            return _fail(f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc}")
        return _fail(str(exc))
    target = f"frontend {args.frontend} via monitor {bound}"
    session.note("start", listen=bound, frontend=args.frontend, validator=session.validator.name,
                 fail_closed=args.fail_closed, frontend_release=session.validator.frontend.profile.release,
                 engine_release=session.validator.engine.profile.release)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    if args.duration is not None:
        timer = threading.Timer(args.duration, stop.set)
        timer.daemon = True
        timer.start()
    console = None
    if (args.console_interval > 0 and not args.quiet) or args.events:
        console = Console(session.metrics, session.clock, None if args.quiet else sys.stderr,
                          args.console_interval if args.console_interval > 0 else 5.0, session.events)
        console.start()
    print(f"ecp monitor: listening on {bound} (engines connect here), relaying to {args.frontend}; "
          f"validator {session.validator.name}; frontend speaks {session.validator.frontend.profile.label}, "
          f"engines {session.validator.engine.profile.label}", file=sys.stderr, flush=True)
    started = time.monotonic()
    problems = []
    try:
        relay.run(stop)
    finally:
        if relay.tripped:
            problems.append("--fail-closed: relaying stopped after the first MUST violation")
        relay.close()
        if console is not None:
            console.stop()
        if server is not None:
            server[0].shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return _finish(args, session, target, time.monotonic() - started, problems)


def replay(args: argparse.Namespace) -> int:
    last_t = [0.0]
    try:
        session = _session(args, clock=lambda: last_t[0], record=False)
    except OSError as exc:
        return _fail(f"cannot open an output file: {exc}")
    except LayoutError as exc:
        return _fail(f"--vllm: {exc}")
    try:
        for item in read_capture(args.replay):
            last_t[0] = item.t
            if isinstance(item, CaptureEvent):
                if item.event == "engine_gone":
                    session.peer_gone(item.rank)
            else:
                session.observe_msg(item)
    except CaptureError as exc:
        session.close()
        return _fail(str(exc))
    return _finish(args, session, f"replay of {args.replay}", last_t[0], [])


def _fail(msg: str) -> int:
    print(f"ecp monitor: {msg}", file=sys.stderr)
    return 2
