"""``ecp conformance list|engine|frontend`` (``explore`` and ``replay``: :mod:`.explore.commands`)."""

from __future__ import annotations

import argparse

from ecp.spec.profile.option import add_release_option

from .pace import STARTUP_TIMEOUT_S


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("conformance", help="run the conformance suite against an engine or frontend")
    sub = p.add_subparsers(dest="conformance_command", metavar="ROLE")
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])

    ls = sub.add_parser(
        "list", help="print the case catalogue and the clauses with neither a case nor a stated reason",
        description="Print every case, then the clause coverage: each spec clause needs a case in every role "
                    "it binds, or a stated reason why it cannot be observed on the wire (and what checks it "
                    "instead). Exit 0, or 2 when the catalogue itself is inconsistent.")
    ls.add_argument("--role", default=None, help="only this role's cases")
    ls.add_argument("--json", action="store_true", help="machine-readable output (cases and the coverage matrix)")
    ls.add_argument("--matrix", action="store_true",
                    help="print the coverage matrix (clause x role -> cases, or the reason) instead of the cases")
    ls.set_defaults(func=_list)

    eng = sub.add_parser(
        "engine", help="check an engine: the harness plays the frontend",
        description="Launch COMMAND (placeholders {handshake_address}, {engine_count}, {engine_start_index}; "
                    "with --transport tcp also {handshake_host}, {handshake_port}) and run the engine-role "
                    "cases against it. Exit 0 pass, 1 conformance failures, 2 harness or usage error, 128+N when "
                    "signal N (SIGTERM, SIGINT, SIGHUP) ended the run (its peers stopped, no report).")
    how = eng.add_mutually_exclusive_group()
    how.add_argument("--attach", metavar="ADDRESS",
                     help="bind the handshake at ADDRESS and wait for an engine you start yourself")
    how.add_argument("--adapter", metavar="MODULE:FUNCTION",
                     help="in-process engine: FUNCTION(handshake_address, engine_count) returns an object with .stop()")
    eng.add_argument("--transport", choices=("ipc", "tcp"), default="ipc",
                     help="ipc sockets in a temp dir (default) or tcp on 127.0.0.1")
    eng.add_argument("--engine-count", type=int, default=1, help="engines (DP ranks) per launch (1)")
    eng.add_argument("--engine-start-index", type=int, default=0, help="global rank of the first engine (0)")
    eng.add_argument("--startup-timeout", type=float, default=STARTUP_TIMEOUT_S, metavar="S",
                     help=f"handshake budget of the first launch ({STARTUP_TIMEOUT_S:g}); later launches get "
                          "4x the slowest measured start-up when that is more")
    eng.add_argument("--engine-vocab-size", type=int, default=None, metavar="V",
                     help="the vocabulary size of the engine's model: every output token id must be below it "
                          "(ECP-OUT-3; no message carries it). Without it only negative ids are refused")
    eng.add_argument("--quiet-window", type=float, default=0.3, metavar="S",
                     help="how long the harness watches for stray outputs after a case's last expected one (0.3)")
    from .capabilities import flag_choices
    from .runner import add_common_options

    eng.add_argument("--engine-lacks", action="append", default=[], metavar="CAP", choices=flag_choices("engine"),
                     help="declare a capability the engine lacks, one of: " + ", ".join(flag_choices("engine")) +
                          " (repeatable). Its cases are then UNSUPPORTED; an undeclared capability that a case "
                          "finds missing is a FAIL. Sleep mode is declared in the ready payload "
                          "(enable_sleep_mode) where the release has that key (vLLM 0.28 on), here before")
    add_release_option(eng, "the vLLM release the harness speaks and judges",
                       auto="the release the first ready payload's vllm_version names; the report says which",
                       effect="A case that needs what the release lacks is UNSUPPORTED.")
    add_common_options(eng)
    eng.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ... that starts the engine")
    eng.set_defaults(func=_engine)

    fe = sub.add_parser(
        "frontend", help="check a frontend: the harness plays the engines",
        description="Launch COMMAND (placeholders {handshake_port}, {handshake_address}, {http_port}, "
                    "{engine_count}) as a frontend whose engines are remote and headless, join its handshake "
                    "with scripted engines and drive it over HTTP. Exit 0 pass, 1 conformance failures, "
                    "2 harness or usage error, 128+N when signal N (SIGTERM, SIGINT, SIGHUP) ended the run (its peers "
                    "stopped, no report).")
    fe_how = fe.add_mutually_exclusive_group()
    fe_how.add_argument("--attach", metavar="ADDRESS",
                        help="the handshake address (tcp://HOST:PORT) of a frontend you started yourself; "
                             "needs --http-url")
    fe_how.add_argument("--adapter", metavar="MODULE:FUNCTION",
                        help="in-process frontend: instead of launching COMMAND, call FUNCTION(argv) with COMMAND's "
                             "words (placeholders filled in) as argv, once per launch; it returns an object with "
                             ".stop(), optionally .alive(), .exit_status(), .wait(timeout) and .frozen() (holds the "
                             "frontend while a burst case drops its streams; without it those cases are "
                             "UNSUPPORTED). ecp.reference.frontend.in_thread:serve runs ecp serve so"),
    fe.add_argument("--http-url", metavar="URL", help="with --attach: the frontend's HTTP base URL")
    fe.add_argument("--no-kv-connector", action="store_true",
                    help="with --attach: the frontend has no KV connector configured (FE-REJECT-1/2 are then "
                         "UNSUPPORTED and FE-REJECT-4 runs); without it an attached frontend is assumed to have one")
    fe.add_argument("--engine-count", type=int, default=2, help="scripted engines (DP ranks) per launch (2)")
    fe.add_argument("--startup-timeout", type=float, default=STARTUP_TIMEOUT_S, metavar="S",
                    help=f"budget for the first launch to finish its handshake and answer /health 200 "
                         f"({STARTUP_TIMEOUT_S:g}); later launches get 4x the slowest measured start-up when that is more")
    fe.add_argument("--quiet-window", type=float, default=0.3, metavar="S",
                    help="how long the harness watches for stray frames before asserting an absence (0.3)")
    fe.add_argument("--frontend-lacks", action="append", default=[], metavar="CAP",
                    choices=flag_choices("frontend"),
                    help="declare a capability the frontend lacks, one of: " + ", ".join(flag_choices("frontend")) +
                         " (repeatable; vLLM 0.33 runs DP waves for MoE models only). Its cases are then "
                         "UNSUPPORTED; an undeclared capability that a case finds missing is a FAIL")
    add_release_option(fe, "the vLLM release the scripted engines speak and the frontend is judged as",
                       auto="one request case first; the release the frontend's traffic fits is named, then used")
    add_common_options(fe)
    fe.set_defaults(case_timeout=30.0)
    fe.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ... that starts the frontend")
    fe.set_defaults(func=_frontend)

    from .explore.commands import register as register_explore

    register_explore(sub)


def http_routes(cases) -> list[dict]:
    """Every route of ``ecp.spec.http.ROUTES`` with its clause and the cases citing that clause."""
    from ecp.spec.http import ROUTES

    return [{"route": r.key, "clause": r.clause, "required": r.required,
             "cases": [c.id for c in cases if r.clause in c.clauses]} for r in ROUTES]


def _list(args: argparse.Namespace) -> int:
    import json

    from .coverage import (
        ROLES, clause_rows, format_matrix, gaps, sentence_gaps, sentence_rows, sentence_summary, sentence_summary_line,
        summary_line,
    )
    from .registry import RegistryError, load_role

    try:
        if args.role and args.role not in ROLES:
            raise RegistryError(f"unknown role {args.role!r} (known: {', '.join(ROLES)})")
        roles = [args.role] if args.role else list(ROLES)
        every = [c for r in ROLES for c in load_role(r)]
    except RegistryError as exc:
        print(f"ecp conformance: {exc}")
        return 2
    cases = [c for c in every if set(c.roles) & set(roles)]
    # which roles a clause binds is read off every role's cases, whichever role is listed
    rows = clause_rows(every, roles=roles)
    must_gaps, other_gaps = gaps(rows, "MUST"), gaps(rows, "SHOULD") + gaps(rows, "MAY")
    srows = sentence_rows(every, roles=roles)
    must_sentences, other_sentences = sentence_gaps(srows, "MUST"), sentence_gaps(srows, "SHOULD") + sentence_gaps(
        srows, "MAY")
    if args.json:
        print(json.dumps({"cases": [c.to_dict() for c in cases], "coverage": [r.to_dict() for r in rows],
                          "http_routes": http_routes(cases) if "frontend" in roles else [],
                          "uncovered_must_clauses": [r.clause for r in must_gaps],
                          "uncovered_should_may_clauses": [r.clause for r in other_gaps],
                          "sentences": [r.to_dict() for r in srows],
                          "sentence_summary": sentence_summary(srows),
                          "uncovered_must_sentences": [r.sentence for r in must_sentences],
                          "uncovered_should_may_sentences": [r.sentence for r in other_sentences]}, indent=1))
        return 0
    if args.matrix:
        for line in format_matrix(rows, roles):
            print(line)
        reasoned = [r for r in rows if r.status == "reason"]
        if reasoned:
            print("\nReasons (clauses not observable on the wire in a role, and what checks them instead):")
            for r in reasoned:
                print(f"  {r.clause} [{', '.join(r.reason.roles)}]: {r.reason.why} Checked by: {r.reason.checked_by}")
        print(f"\n{'sentence':<16} {'level':<6} " + " ".join(f"{r:<34}" for r in roles) + " text")
        for s in srows:
            cells = []
            for role in roles:
                if role not in s.binds:
                    cells.append("-")
                elif s.cases.get(role):
                    cells.append(" ".join(s.cases[role]))
                elif s.reason and role in s.reason.roles:
                    cells.append(f"(reason: {s.reason_key})")
                else:
                    cells.append("MISSING")
            print(f"{s.sentence:<16} {s.level:<6} " + " ".join(f"{c:<34}" for c in cells) + f" {s.text[:70]}")
        own = [s for s in srows if s.reason_key == s.sentence]
        if own:
            print("\nReasons for sentences (what checks them instead):")
            for s in own:
                print(f"  {s.sentence} [{', '.join(s.reason.roles)}]: {s.reason.why} Checked by: "
                      f"{s.reason.checked_by}")
    else:
        for c in cases:
            print(f"{c.id:<13} {c.clause:<14} {c.level:<6} {c.conformance_level:<8} {c.slug:<38} {c.requirement}")
            if c.also:
                print(f"{'':<13} also {', '.join(c.also)}")
        cited = {cl for c in cases for cl in c.clauses}
        print(f"\n{len(cases)} case(s) cite {len(cited)} clause(s) "
              f"({', '.join(roles)} role{'s' if len(roles) > 1 else ''}).")
        if "frontend" in roles:
            print("\nHTTP routes the frontend role drives (spec/PROTOCOL.md section 14), their clause and cases:")
            for r in http_routes(cases):
                print(f"  {r['route']:<28} {r['clause']:<12} {' '.join(r['cases']) or '-'}")
    print(summary_line(rows))
    print(sentence_summary_line(srows))
    for label, found in (("MUST", must_gaps), ("SHOULD/MAY", other_gaps)):
        print(f"{label} clauses without a case or reason: {len(found)}")
        for r in found:
            print(f"  {r.clause:<14} {r.title} (no case in the {' and '.join(r.missing_roles)} role"
                  f"{'s' if len(r.missing_roles) > 1 else ''})")
    for label, sfound in (("MUST", must_sentences), ("SHOULD/MAY", other_sentences)):
        per_role = {role: sum(role in s.missing_roles for s in sfound) for role in roles}
        print(f"{label} sentences without a check or reason: {len(sfound)} ("
              + ", ".join(f"{role} {n}" for role, n in per_role.items()) + ")")
        for s in sfound:
            print(f"  {s.sentence:<16} {s.level:<6} [{', '.join(s.missing_roles)}] {s.text[:90]}")
    return 0


def _engine(args: argparse.Namespace) -> int:
    import sys

    from .runner import run

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    modes = sum(bool(x) for x in (command, args.attach, args.adapter))
    if modes != 1:
        print("ecp conformance engine: give exactly one of -- COMMAND ..., --attach ADDRESS, --adapter M:F",
              file=sys.stderr)
        return 2
    if args.engine_count < 1 or not 0 <= args.engine_start_index <= 0xFFFF - args.engine_count:
        print("ecp conformance engine: bad --engine-count/--engine-start-index", file=sys.stderr)
        return 2
    if args.startup_timeout <= 0 or args.quiet_window < 0:
        print("ecp conformance engine: --startup-timeout must be > 0 and --quiet-window >= 0", file=sys.stderr)
        return 2
    if args.transport != "tcp" and any("{handshake_host}" in a or "{handshake_port}" in a for a in command):
        print("ecp conformance engine: {handshake_host}/{handshake_port} need --transport tcp "
              "(with ipc use {handshake_address})", file=sys.stderr)
        return 2
    under_test = None  # auto: chosen from the first ready payload
    if args.vllm != "auto":
        from ecp.spec.layout.model import LayoutError
        from ecp.spec.profile import resolve_profile

        try:
            under_test = resolve_profile(args.vllm).release
        except LayoutError as exc:
            print(f"ecp conformance engine: --vllm: {exc}", file=sys.stderr)
            return 2
    role_config = {
        "vllm": args.vllm,
        "command": command, "attach": args.attach, "adapter": args.adapter, "transport": args.transport,
        "engine_count": args.engine_count, "engine_start_index": args.engine_start_index,
        "startup_timeout_s": args.startup_timeout, "quiet_window_s": args.quiet_window,
        "lacks": sorted(set(args.engine_lacks)), "vocab_size": args.engine_vocab_size,
    }
    target = " ".join(command) if command else f"--attach {args.attach}" if args.attach else f"--adapter {args.adapter}"
    from .engine.session import EngineManager

    return run(EngineManager, args, role_config, target, under_test)


def _frontend(args: argparse.Namespace) -> int:
    import shlex
    import sys

    import h11  # noqa: F401 - the [conformance] extra's HTTP clients, checked before anything starts
    import httpx  # noqa: F401

    from .runner import run

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if bool(command) == bool(args.attach) or bool(args.attach) != bool(args.http_url):
        print("ecp conformance frontend: give either -- COMMAND ... (or --adapter M:F -- ARGS ...) or "
              "--attach ADDRESS --http-url URL", file=sys.stderr)
        return 2
    if not 1 <= args.engine_count <= 0xFFFF:
        print("ecp conformance frontend: bad --engine-count", file=sys.stderr)
        return 2
    missing = [p for p, alternatives in (("{handshake_port}", ("{handshake_port}", "{handshake_address}")),
                                         ("{http_port}", ("{http_port}",)))
               if command and not any(alt in arg for arg in command for alt in alternatives)]
    if missing:
        # The harness picks free ports per launch and only looks for the frontend there: without
        # these every case would wait out --startup-timeout for a frontend it cannot reach.
        print(f"ecp conformance frontend: COMMAND does not use {' or '.join(missing)}; the harness picks the "
              f"ports and reaches the frontend only there (e.g. --data-parallel-rpc-port {{handshake_port}} "
              f"--port {{http_port}})", file=sys.stderr)
        return 2
    if args.no_kv_connector and not args.attach:
        print("ecp conformance frontend: --no-kv-connector is for --attach; with COMMAND the harness reads "
              "the KV connector options from the command line", file=sys.stderr)
        return 2
    role_config = {
        "command": command, "adapter": args.adapter, "attach": args.attach, "http_url": args.http_url,
        "engine_count": args.engine_count,
        "attach_kv_connector": not args.no_kv_connector, "lacks": sorted(set(args.frontend_lacks)),
        "startup_timeout_s": args.startup_timeout, "quiet_window_s": args.quiet_window,
    }
    target = (f"--adapter {args.adapter} -- " if args.adapter else "") + shlex.join(command) if command else \
        f"--attach {args.attach} --http-url {args.http_url}"
    reference = args.vllm
    if reference == "auto":
        from .frontend.auto_release import pick

        chosen = pick(args, role_config, target, run)
        print(chosen.sentence, flush=True)
        reference = chosen.release
    from ecp.spec.layout.model import LayoutError

    from .frontend.engine_release import engine_release

    try:
        release = engine_release(reference)
    except LayoutError as exc:
        print(f"ecp conformance frontend: --vllm: {exc}", file=sys.stderr)
        return 2
    from .frontend.session import FrontendManager

    return run(FrontendManager, args, {**role_config, "vllm": reference}, target, release.release)
