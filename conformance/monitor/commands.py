"""``ecp monitor``: relay and validate live traffic, or ``--replay`` a capture."""

from __future__ import annotations

import argparse

from ecp.spec import VLLM_RELEASE
from ecp.spec.profile.option import add_release_option

DESCRIPTION = """\
Sit between a frontend and its engines and check every message against the protocol.
Start the frontend with its handshake at --frontend, start the engines with --listen as
their handshake address, and the monitor relays the handshake, rewrites the socket
addresses in INIT so that input, output and coordinator traffic passes through it too,
and relays every message unchanged (unless --fail-closed). It prints a live summary,
and at exit (SIGINT/SIGTERM or --duration) a report in the conformance formats.
--replay FILE re-checks a capture written by --record offline.
--vllm / --frontend-vllm / --engine-vllm name the releases the two sides speak.
Exit 0: no MUST violation (no violation at all with --strict); 1: violations;
2: usage error or a failure of the monitor itself."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("monitor", help="a transparent, validating proxy between a frontend and its engines",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("where")
    g.add_argument("--listen", metavar="ADDRESS",
                   help="the handshake address the engines connect to (tcp://HOST:PORT or ipc://PATH)")
    g.add_argument("--frontend", metavar="ADDRESS",
                   help="the real frontend's handshake address (e.g. tcp://127.0.0.1:13345 for "
                        "--data-parallel-address 127.0.0.1 --data-parallel-rpc-port 13345)")
    g.add_argument("--relay-host", default="127.0.0.1", metavar="HOST",
                   help="interface for the relay's tcp sockets, an address the engines can reach (127.0.0.1)")
    g.add_argument("--max-engines", type=int, default=256, metavar="N",
                   help="engine identities relayed at most (256); HELLOs under further identities are dropped, "
                        "counted and logged once")
    g.add_argument("--max-clients", type=int, default=64, metavar="N",
                   help="client socket pairs one INIT may make the relay build (64); a larger INIT is forwarded "
                        "unrewritten, with one log line")
    g.add_argument("--replay", metavar="FILE", help="re-check a capture written by --record instead of relaying")
    g.add_argument("--duration", type=float, default=None, metavar="S", help="stop after S seconds")
    g = p.add_argument_group("checking")
    g.add_argument("--validator", choices=("machines", "codec"), default="machines",
                   help="machines: every rule of the protocol machines (default); codec: decoding only")
    g.add_argument("--fail-closed", action="store_true",
                   help="check each message before relaying it and stop relaying at the first MUST violation")
    g.add_argument("--strict", action="store_true", help="SHOULD/MAY violations also fail (exit 1)")
    add_release_option(g, "the vLLM release both sides speak", auto="the release each side's traffic fits best",
                       default=None, effect=f"Without it, both sides speak vLLM {VLLM_RELEASE}.")
    add_release_option(g, "the frontend's release", flag="--frontend-vllm", dest="frontend_vllm", default=None,
                       auto="the release its traffic fits best", effect="It overrides --vllm for that side.")
    add_release_option(g, "the engines' release", flag="--engine-vllm", dest="engine_vllm", default=None,
                       auto="the release their traffic fits best",
                       effect="It overrides --vllm for that side. Each side's messages are decoded with its own "
                              "release; one the other side's release refuses is a finding naming the `ecp spec "
                              "diff` rule (DIFF-nnn) and the message it shows in.")
    g = p.add_argument_group("output")
    g.add_argument("--record", metavar="FILE", help="write a capture of every message (readable by ecp decode --file)")
    g.add_argument("--events", metavar="FILE", help="write a JSON-lines event log")
    g.add_argument("--log-messages", action="store_true", help="with --events: one event per relayed message")
    g.add_argument("--transcripts", metavar="DIR", help="write one transcript file per violation (hex + decoded)")
    g.add_argument("--max-transcripts", type=int, default=1000, metavar="N", help="transcript files at most (1000)")
    g.add_argument("--report-json", metavar="FILE", help="write the JSON report at exit")
    g.add_argument("--report-md", metavar="FILE", help="write the Markdown report at exit")
    g.add_argument("--junit-xml", metavar="FILE", help="write a JUnit XML report at exit")
    g.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve Prometheus metrics on PORT (needs prometheus-client, the serve extra)")
    g.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST", help="interface for --metrics-port")
    g.add_argument("--console-interval", type=float, default=5.0, metavar="S",
                   help="seconds between live summaries (5; 0 = none)")
    g.add_argument("--quiet", action="store_true", help="no live summary and no report on the console")
    p.set_defaults(func=_monitor)


def _usage(msg: str) -> int:
    import sys

    print(f"ecp monitor: {msg}", file=sys.stderr)
    return 2


def _monitor(args: argparse.Namespace) -> int:
    if args.replay:
        if args.listen or args.frontend or args.record or args.fail_closed or args.metrics_port is not None:
            return _usage("--replay takes no --listen/--frontend/--record/--fail-closed/--metrics-port")
        from .run import replay

        return replay(args)
    if not (args.listen and args.frontend):
        return _usage("give --listen and --frontend (or --replay FILE); see ecp monitor --help")
    from .run import live

    return live(args)
