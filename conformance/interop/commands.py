"""``ecp interop run|site|check`` (docs/interop-site.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("interop", help="run the interop matrix, render its results site, check a submission")
    sub = p.add_subparsers(dest="interop_command", metavar="COMMAND")
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])

    run = sub.add_parser(
        "run", help="run implementations x releases x roles into a results set, resuming where it stopped",
        description="Run `ecp conformance ROLE ... --results` for every configured implementation and release "
                    "into OUT (one folder per run, set.json for the set); a run whose folder has a result.json "
                    "is not run again. Built in: the reference peers of every shipped release in both roles and "
                    "the real vLLM peers installed under ~/.cache/vllm-peer-RELEASE (a release without one is "
                    "recorded as missing, with why). Exit 0 when every run passed, 1 otherwise, 2 on usage errors.")
    run.add_argument("--out", type=Path, required=True, metavar="DIR", help="the results set's folder")
    run.add_argument("--config", type=Path, action="append", default=[], metavar="FILE",
                     help="add the implementations of this JSON file (docs/interop-site.md; repeatable)")
    run.add_argument("--no-builtin", action="store_true", help="run only the --config implementations")
    run.add_argument("--only", action="append", default=[], metavar="NAME",
                     help="only implementations of this name (repeatable; `ecp interop run --list` names them)")
    run.add_argument("--release", action="append", default=[], metavar="R", help="only these releases (repeatable)")
    run.add_argument("--peers", type=Path, default=None, metavar="DIR",
                     help="where the vLLM peers are installed (default ~/.cache)")
    run.add_argument("--level", choices=("interop", "hardened"), default="hardened",
                     help="the level of the vLLM peers' runs (default hardened)")
    run.add_argument("--machine", metavar="NAME", help="a name for this machine in the results")
    run.add_argument("--run-budget", type=float, default=None, metavar="S",
                     help="stop a run that takes longer than this (default 3600 s)")
    run.add_argument("--list", action="store_true", help="print what would run, run nothing")
    run.set_defaults(func=_run)

    site = sub.add_parser(
        "site", help="render the static results site of a folder of results sets",
        description="Render RESULTS_DIR (a folder of results sets: each a folder of runs with result.json, as "
                    "`ecp interop run --out RESULTS_DIR/SET` writes them) as a static site in OUT: per role a "
                    "matrix implementations x releases of the newest set, a page per run with its cases, reasons, "
                    "expected failures and transcripts, the cross-release matrix (observed beside predicted), "
                    "the history of sets with the diff of two, and a page per case. Open OUT/index.html. "
                    "Exit 0, or 2 when a result does not fit the schema (one line per problem).")
    site.add_argument("results", type=Path, metavar="RESULTS_DIR")
    site.add_argument("-o", "--out", type=Path, required=True, metavar="OUT")
    from ecp.spec.diff.observed import OBSERVED_PATH

    site.add_argument("--observed", default=str(OBSERVED_PATH), metavar="FILE|none",
                      help="the executed cross-release matrix (default spec/compat/observed-cross.json; "
                           "'none': leave the page empty)")
    site.add_argument("--title", default="ecp interop results", help="the site's title")
    site.set_defaults(func=_site)

    chk = sub.add_parser(
        "check", help="check a submission: product.json and results against the schema and this ecp",
        description="Check a submission folder (product.json and one or more runs with result.json and "
                    "transcripts, docs/interop-site.md): every result fits the schema, was made with this ecp "
                    "version, names the product, ran every case of its role, and has the transcripts it names. "
                    "Prints one line per problem. Exit 0 accepted, 1 refused.")
    chk.add_argument("folder", type=Path, metavar="DIR")
    chk.set_defaults(func=_check)


def _run(args: argparse.Namespace) -> int:
    from .matrix import RUN_BUDGET_S, ConfigError, builtin, describe, load_config, run_set

    try:
        impls = [] if args.no_builtin else builtin(args.peers, args.level)
        for path in args.config:
            impls += load_config(path)
    except ConfigError as exc:
        print(f"ecp interop run: {exc}", file=sys.stderr)
        return 2
    everything = impls
    if args.only:
        unknown = set(args.only) - {i.name for i in impls}
        if unknown:
            print(f"ecp interop run: unknown implementation(s) {sorted(unknown)}; known: "
                  f"{sorted({i.name for i in impls})}", file=sys.stderr)
            return 2
        everything, impls = impls, [i for i in impls if i.name in args.only]
    if args.list:
        for line in describe(impls):
            print(line)
        return 0
    failed = run_set(impls, args.out, releases=args.release or None, machine_name=args.machine, known=everything,
                     budget_s=args.run_budget or RUN_BUDGET_S, say=lambda s: print(s, flush=True))
    print(f"ecp interop run: results in {args.out} ({failed} run(s) did not pass); "
          f"render them with: ecp interop site {args.out.parent} -o SITE")
    return 1 if failed else 0


def _site(args: argparse.Namespace) -> int:
    from ecp.spec.layout.model import LayoutError

    from .site import SiteError, render

    observed = None if args.observed == "none" else Path(args.observed)
    try:
        pages = render(args.results, args.out, observed, args.title)
    except SiteError as exc:
        for line in exc.problems:
            print(f"ecp interop site: {line}", file=sys.stderr)
        return 2
    except LayoutError as exc:
        print(f"ecp interop site: --observed: {exc}", file=sys.stderr)
        return 2
    print(f"ecp interop site: {len(pages)} page(s) in {args.out}; open {args.out / 'index.html'}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from .check import check

    problems = check(args.folder)
    for line in problems:
        print(f"{args.folder}: {line}")
    if problems:
        print(f"ecp interop check: {args.folder} refused: {len(problems)} problem(s)")
        return 1
    print(f"ecp interop check: {args.folder} accepted")
    return 0
