"""``ecp conformance explore engine|frontend`` and ``ecp conformance replay``."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ecp.spec import VLLM_RELEASE
from ecp.spec.profile.option import add_release_option

_TIME = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_time(text: str) -> float:
    """``90``, ``90s``, ``2m``, ``1h``, ``500ms`` -> seconds; ``argparse.ArgumentTypeError`` otherwise."""
    m = _TIME.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a positive duration: {text!r} (e.g. 90s, 2m, 1h)")
    return float(m.group(1)) * _UNIT[m.group(2)]


def register(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser(
        "explore", help="random legal sessions against a peer, every frame judged, findings shrunk",
        description="Draw random legal sessions (ADDs, ABORTs, utility calls, pause/resume, sleep/wake, DP waves, "
                    "several clients and ranks, timing choices), play each against a fresh launch of COMMAND "
                    "(placeholders as for 'ecp conformance engine'), judge every frame with the protocol machine "
                    "and the session's history with the explorer's properties, and shrink each new finding to a "
                    "reproducer file. Exit 0 no finding, 1 findings, 2 harness or usage error.")
    roles = ex.add_subparsers(dest="explore_role", metavar="ROLE")
    ex.set_defaults(func=lambda a: (ex.print_help(), 2)[1])
    eng = roles.add_parser("engine", help="explore an engine: the harness plays the frontend",
                           description=ex.description)
    _common_options(eng, engines_help="most engines (DP ranks) per launch (2: the faults of data parallelism, "
                                      "a rank that answers unlike another, need two)", max_steps=24, engines=2)
    eng.add_argument("--transport", choices=("ipc", "tcp"), default="ipc")
    eng.add_argument("--no-malformed", action="store_true",
                     help="leave out the steps that send a malformed input message (only legal traffic)")
    eng.add_argument("--no-duplicates", action="store_true",
                     help="leave out the duplicate ADDs (an id in flight: ECP-REQ-2, hardened; vLLM 0.33's engine "
                          "core fails closed on one)")
    eng.add_argument("--process-faults", action=argparse.BooleanOptionalAction, default=True,
                     help="give some sessions one process fault: SIGSTOP/SIGCONT of one rank's process, or a "
                          "SIGKILL of it, after which the engine must be seen dead (on)")
    from ..capabilities import flag_choices

    eng.add_argument("--engine-lacks", action="append", default=[], metavar="CAP", choices=flag_choices("engine"),
                     help="declare a capability the engine lacks, as for `ecp conformance engine` (repeatable): "
                          "with logprobs, a request that asked for logprobs may get none (ECP-HS-4)")
    eng.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ... that starts the engine")
    eng.set_defaults(func=_explore_engine)

    fe = roles.add_parser(
        "frontend", help="explore a frontend: the harness plays its engines and its HTTP clients",
        description="Draw random sessions of concurrent HTTP requests (completions and chat, streaming or not, "
                    "varied parameters), streams dropped right after their head or their first event, explicit "
                    "aborts and utility routes, against scripted engines whose timing and output forms vary; play "
                    "each against a fresh launch of COMMAND (placeholders as for 'ecp conformance frontend': "
                    "{handshake_port}, {handshake_address}, {http_port}, {engine_count}); judge every frame the "
                    "frontend sends with the engines' protocol machines and each session's history, and shrink "
                    "each new finding to a reproducer file. Exit 0 no finding, 1 findings, 2 harness or usage error.")
    _common_options(fe, engines_help="most scripted engines per launch (1)", max_steps=16)
    fe.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ... that starts the frontend")
    fe.set_defaults(func=_explore_frontend)

    rp = sub.add_parser(
        "replay", help="re-run an explorer reproducer file",
        description="Play the session of a reproducer file against a fresh launch of COMMAND (default: the "
                    "command recorded in the file), speaking and judging as the vLLM release the file records "
                    "(--vllm: another). Exit 1 while a violation shows (the recorded clause or another), 0 when "
                    "none does, 2 on a harness or usage error or when the file's release cannot be resolved.")
    rp.add_argument("file", type=Path)
    _replay_options(rp)
    rp.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ... (default: the file's)")
    rp.set_defaults(func=_replay)


def _common_options(p: argparse.ArgumentParser, *, engines_help: str, max_steps: int, engines: int = 1) -> None:
    """The options both roles of ``explore`` take."""
    p.add_argument("--budget", type=parse_time, default=600.0, metavar="TIME",
                   help="how long the whole run may take, confirming and shrinking findings included; the "
                        "session playing when it runs out is finished (600s; e.g. 90s, 2m)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first session; session k uses SEED+k (0)")
    p.add_argument("--engine-count", type=int, default=engines, help=engines_help)
    p.add_argument("--max-steps", type=int, default=max_steps, help=f"most steps per session ({max_steps})")
    p.add_argument("--out", type=Path, default=Path("explore-findings"), metavar="DIR",
                   help="where reproducer files go (./explore-findings)")
    p.add_argument("--shrink-budget", type=parse_time, default=300.0, metavar="TIME",
                   help="the most time shrinking one finding may take, within --budget (300s)")
    p.add_argument("--shrink-runs", type=int, default=200, help="most replays per finding for shrinking (200)")
    p.add_argument("--step-timeout", type=parse_time, default=10.0, metavar="TIME",
                   help="how long a wait step, a state-changing call or the end of a session may go "
                        "without any output from the peer (10s)")
    p.add_argument("--startup-timeout", type=parse_time, default=60.0, metavar="TIME",
                   help="handshake budget per launch (60s)")
    p.add_argument("--quiet-window", type=parse_time, default=0.3, metavar="TIME",
                   help="how long the end of a session watches for frames after the last one owed, and how "
                        "long a request that reached max_tokens may go without its terminal output (0.3s)")
    p.add_argument("--max-findings", type=int, default=None, help="stop after this many distinct findings")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line every 5 s (sessions, messages, findings); findings and the summary "
                        "are still printed")
    _release_option(p, default=VLLM_RELEASE)


def _release_option(p: argparse.ArgumentParser, default: str | None) -> None:
    """``--vllm``, as ``ecp conformance engine|frontend`` take it (without ``auto``: a session is drawn
    for its release before anything is heard from the peer); ``default`` None: replay's (the file's)."""
    if default is None:
        add_release_option(p, "replay as this vLLM release", default=None,
                           effect="Without it, the release the file records.")
        return
    speaks = "the scripted engines speak and the frontend is judged as" if p.prog.endswith("frontend") \
        else "the harness speaks and judges the engine as"
    add_release_option(p, f"the vLLM release {speaks}", default=default,
                       effect="Sessions hold only what that release has (its utility methods, request fields, type "
                              "bytes), its codec writes and reads the frames, and a clause that needs a feature it "
                              "lacks is not judged; reproducers record it.")


def _replay_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=1, help="replays; exit 1 if any shows a violation (1)")
    parser.add_argument("--step-timeout", type=parse_time, default=10.0, metavar="TIME")
    parser.add_argument("--startup-timeout", type=parse_time, default=60.0, metavar="TIME")
    _release_option(parser, default=None)


def _split_replay(args: argparse.Namespace) -> list[str]:
    """The COMMAND of ``replay FILE [OPTIONS] [-- COMMAND]``: options after FILE land in the
    remainder (argparse stops at the first positional's remainder), so they are read here."""
    rest = list(args.command)
    if "--" in rest:
        at = rest.index("--")
        options, command = rest[:at], rest[at + 1:]
    else:
        options, command = rest, []
    if options:
        late = argparse.ArgumentParser(prog="ecp conformance replay FILE", add_help=False)
        _replay_options(late)
        late.parse_args(options, namespace=args)
    return command


def _command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    return command[1:] if command and command[0] == "--" else command


def _explore_engine(args: argparse.Namespace) -> int:
    return _explore(args, "engine", **_engine_extra(args))


def _explore_frontend(args: argparse.Namespace) -> int:
    return _explore(args, "frontend")


def options(argv: list[str]):
    """The :class:`.run.ExploreOptions` that ``ecp conformance explore ARGV`` runs with (ARGV: ``engine|frontend
    [OPTIONS] -- COMMAND``): what a benchmark measures is then what a user gets. Raises ``SystemExit``
    on bad arguments, as argparse does."""
    from ecp.spec.cli import build_parser

    args = build_parser().parse_args(["conformance", "explore", *argv])
    extra = _ROLE_EXTRA[args.explore_role](args)
    return _options(args, args.explore_role, **extra)


def _engine_extra(args: argparse.Namespace) -> dict:
    return {"transport": args.transport, "malformed": not args.no_malformed, "duplicates": not args.no_duplicates,
            "process_faults": args.process_faults, "engine_lacks": tuple(args.engine_lacks)}


_ROLE_EXTRA = {"engine": _engine_extra, "frontend": lambda args: {}}


def _options(args: argparse.Namespace, role: str, **extra):
    from .run import PROGRESS_S, ExploreOptions

    return ExploreOptions(command=_command(args), role=role, engine_count=args.engine_count, budget_s=args.budget,
                          seed=args.seed, max_steps=args.max_steps, out_dir=args.out, shrink_runs=args.shrink_runs,
                          shrink_s=args.shrink_budget, step_timeout_s=args.step_timeout,
                          startup_timeout_s=args.startup_timeout, max_findings=args.max_findings,
                          quiet_window_s=args.quiet_window, progress_s=0.0 if args.quiet else PROGRESS_S,
                          vllm=args.vllm, **extra)


def _explore(args: argparse.Namespace, role: str, **extra) -> int:
    from .execute import LaunchFailed
    from .run import explore

    name = f"ecp conformance explore {role}"
    command = _command(args)
    if not command:
        print(f"{name}: give -- COMMAND ... that starts the {role}", file=sys.stderr)
        return 2
    if args.engine_count < 1 or args.max_steps < 1 or args.shrink_runs < 0:
        print(f"{name}: --engine-count and --max-steps must be >= 1, --shrink-runs >= 0", file=sys.stderr)
        return 2
    opts = _options(args, role, **extra)
    from ecp.spec.layout.model import LayoutError

    from .run import release_line

    if args.vllm == "auto":
        print(f"{name}: --vllm auto is not taken here: a session is drawn for its release before the peer says "
              "anything; name the release (`ecp spec release list`) or a layout file, vLLM checkout or wheel",
              file=sys.stderr)
        return 2
    try:
        profile = opts.profile
    except LayoutError as exc:
        print(f"{name}: --vllm: {exc}", file=sys.stderr)
        return 2
    print(release_line(profile, f"--vllm {args.vllm}"), flush=True)
    try:
        report = explore(opts, say=lambda line: print(line, flush=True))
    except LaunchFailed as exc:
        print(f"{name}: the {role} did not come up: {exc}", file=sys.stderr)
        return 2
    if report.interrupted:
        from ..interrupts import ignore_further

        ignore_further()  # its peers are stopped; a second signal must not cut the summary short
    cut = f" (interrupted by {report.interrupted})" if report.interrupted else ""
    print(f"\n{report.sessions} session(s), {report.messages} message(s) judged as vLLM {report.release} in "
          f"{report.elapsed_s:.1f}s{cut}; {len(report.findings)} finding(s)")
    for f in report.findings:
        steps = f"{f.steps_before} -> {f.steps_after} steps" if f.steps_after is not None else \
            f"{f.steps_before} steps, not shrunk"
        state = "reproducible" if f.reproducible else \
            "not confirmed (interrupted)" if f.replays == "interrupted" else \
            "not confirmed (budget spent)" if f.replays.endswith("budget spent") else "NOT reproducible"
        print(f"  {f.clause:<13} after {f.found_after_s:.1f}s (seed {f.seed}), {steps}, {state} "
              f"(replays {f.replays}), seen in {f.recurrence} session(s): {f.path}")
    return 1 if report.findings else 0


def _replay(args: argparse.Namespace) -> int:
    import tempfile

    from ecp.spec.layout.model import LayoutError

    from .execute import LaunchFailed
    from .reproducer import UNRECORDED_RELEASE, ReproducerError, read, release_of_file
    from .run import ExploreOptions, release_line, runner_for
    from .session import describe

    try:
        doc = read(args.file)
    except ReproducerError as exc:
        print(f"ecp conformance replay: {exc}", file=sys.stderr)
        return 2
    command = _split_replay(args) or list(doc.get("command") or [])
    try:
        profile = release_of_file(doc, args.file, args.vllm)
    except ReproducerError as exc:  # the file's release cannot be resolved here
        print(f"ecp conformance replay: {exc}", file=sys.stderr)
        return 2
    except LayoutError as exc:
        print(f"ecp conformance replay: --vllm: {exc}", file=sys.stderr)
        return 2
    recorded = doc.get("vllm", UNRECORDED_RELEASE)
    vllm = args.vllm if args.vllm is not None else recorded
    if not command or args.runs < 1:
        print("ecp conformance replay: give -- COMMAND ... (the file records none) and --runs >= 1", file=sys.stderr)
        return 2
    session = doc["session"]
    how = f"--vllm {args.vllm}; the file's is {recorded}" if args.vllm is not None else f"the file's: --vllm {recorded}"
    print(release_line(profile, how))
    print(f"replaying {args.file}: {doc['clause']} ({len(session.steps)} step(s), {session.topology})")
    for step in session.steps:
        print(f"  {describe(step)}")
    opts = ExploreOptions(command=command, role=doc["role"],
                          engine_count=max(session.topology.engines, int(doc.get("engine_count", 1))),
                          transport=doc.get("transport", "ipc"), step_timeout_s=args.step_timeout,
                          startup_timeout_s=args.startup_timeout,
                          engine_lacks=tuple(doc.get("engine_lacks") or ()), vllm=vllm)
    shown = 0
    with tempfile.TemporaryDirectory(prefix="ecp-replay-") as workdir:
        runner = runner_for(opts, workdir)
        try:
            for run in range(1, args.runs + 1):
                try:
                    result = runner.play(session)
                except LaunchFailed as exc:
                    print(f"ecp conformance replay: the {doc['role']} did not come up: {exc}", file=sys.stderr)
                    return 2
                same = doc["clause"] in result.clauses
                shown += bool(result.findings)
                verdict = (f"{doc['clause']} again" if same else
                           f"other violation(s) {result.clauses}" if result.findings else "no violation")
                print(f"run {run}: {verdict}")
                for f in result.findings[:5]:
                    print(f"  {f.clause} at step {f.step}: {f.message}")
        finally:
            runner.close()
    return 1 if shown else 0
