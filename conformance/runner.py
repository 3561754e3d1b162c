"""Runs a role's cases in-process with ``pytest.main`` and writes the reports.

Role-neutral: a role contributes its case modules (:data:`CASE_MODULES`) and its peer manager
(``ecp.conformance.plugin.PeerManager``, passed by type with its config section); everything else
(selection, verdicts, expected failures, reports, exit codes) is shared. The run's declarations go
to the harness object and its results come back on it, in memory.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import expected as xf
from .interrupts import Interrupted, ignore_further, interruptible
from .registry import RegistryError, load_role
from .report import RunSummary, markdown, write_console, write_html, write_json, write_junit, write_transcripts

if TYPE_CHECKING:
    from .plugin import PeerManager

#: role -> case modules, in catalogue order (a role's manager may run them in phases: run_phase)
CASE_MODULES: dict[str, tuple[str, ...]] = {
    "engine": ("handshake", "requests", "encoding", "abort", "reject", "utility", "wire", "dp", "robustness",
               "security"),
    "frontend": ("handshake", "requests", "outputs", "abort", "reject", "security", "utility", "dp", "http",
                 "robustness"),
}
CASE_PACKAGES = {"engine": Path(__file__).parent / "engine" / "cases",
                 "frontend": Path(__file__).parent / "frontend" / "cases"}


class UsageError(Exception):
    """Bad command line or input files: exit 2."""


def add_common_options(p: argparse.ArgumentParser) -> None:
    """Options every role shares: selection, strictness, expected failures, reports."""
    p.add_argument("--case", action="append", default=[], metavar="PATTERN",
                   help="run only cases whose id or slug matches this glob (repeatable)")
    p.add_argument("--strict", action="store_true", help="SHOULD/MAY violations fail the run")
    p.add_argument("--level", choices=("interop", "hardened"), default="hardened",
                   help="conformance level the run requires: 'interop' (what interoperation with vLLM 0.33 "
                        "needs; failures of hardened-level clauses are reported as 'not required' and do not "
                        "fail the run) or 'hardened' (everything; default)")
    p.add_argument("--case-timeout", type=float, default=10.0, metavar="S", help="time budget per case (%(default)g)")
    p.add_argument("--expected-failures", metavar="FILE|NAME",
                   help="known failures: a file with '<case id or glob> <reason>' per line, or the name of a "
                        f"shipped one ({', '.join(xf.shipped())})")
    p.add_argument("--update-expected-failures", action="store_true",
                   help="rewrite --expected-failures FILE to list exactly the cases failing now")
    p.add_argument("--junit-xml", metavar="FILE", help="write a JUnit XML report")
    p.add_argument("--json", dest="json_path", metavar="FILE", help="write JSON results (conformance/schema/results.schema.json)")
    p.add_argument("--markdown", metavar="FILE", help="write a Markdown report")
    p.add_argument("--html", metavar="FILE", help="write an HTML report")
    p.add_argument("--transcripts", metavar="DIR", help="write one transcript file per failing case")
    p.add_argument("--results", metavar="DIR",
                   help="write the interop results document DIR/result.json (conformance/interop/schema/"
                        "run.schema.json) with the transcripts beside it (docs/interop-site.md)")
    p.add_argument("--implementation", metavar="NAME",
                   help="with --results: the implementation's name (default: the command's program)")
    p.add_argument("--implementation-version", metavar="VERSION", help="with --results: its version")
    p.add_argument("--implementation-commit", metavar="COMMIT", help="with --results: its source commit")
    p.add_argument("--machine", metavar="NAME", help="with --results: a name for the machine it ran on")
    p.add_argument("--keep-workdir", action="store_true", help="keep the temp dir with sockets and peer logs")
    p.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output too")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no line per case while the run goes (on stderr: id, outcome, seconds, cases left); "
                        "for CI logs")


def run(manager: "type[PeerManager]", args: argparse.Namespace, role_config: dict[str, Any], target: str,
        under_test: str | None = None) -> int:
    """Run the cases of ``manager``'s role against the peers it manages (``role_config``: the keyword
    arguments of its ``Config``); print the summary; return the exit code (0/1/2). ``under_test``: the vLLM
    release the peer is judged as (``--vllm``), named in the first line; the suite's own by default."""
    from .release import UNDER_TEST

    role = manager.role
    try:
        catalogue = load_role(role)
        entries = xf.load(args.expected_failures) if args.expected_failures else []
        if args.case_timeout <= 0:
            raise UsageError(f"--case-timeout must be > 0, got {args.case_timeout}")
        if args.update_expected_failures and not args.expected_failures:
            raise UsageError("--update-expected-failures needs --expected-failures FILE")
        if args.update_expected_failures and not Path(args.expected_failures).is_file():
            raise UsageError("--update-expected-failures rewrites a file: give its path (copy a shipped one "
                             f"first: {xf.resolve(args.expected_failures)})")
        check_outputs(args)
        selected = [c for c in catalogue if not args.case or any(
            fnmatch.fnmatchcase(c.id, p) or fnmatch.fnmatchcase(c.slug, p) for p in args.case)]
        if not selected:
            raise UsageError(f"--case {' '.join(args.case)} matches no {role}-role case")
    except (RegistryError, xf.ExpectedFailuresError, UsageError) as exc:
        print(f"ecp conformance: {exc}", file=sys.stderr)
        return 2
    print(f"ecp conformance {role}: {len(selected)} case(s) at level {args.level} against {target} "
          f"as vLLM {under_test or UNDER_TEST}", flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="ecp-conf-"))
    started = time.monotonic()
    try:
        from .plugin import Harness, RunSpec

        harness = Harness(RunSpec(
            manager=manager, peer_config={**role_config, "workdir": str(workdir), "case_timeout_s": args.case_timeout},
            patterns=args.case, strict=args.strict, level=args.level, under_test=under_test, expected=entries,
            update_expected=bool(args.update_expected_failures), progress=not getattr(args, "quiet", False)))
        ini = workdir / "pytest.ini"
        ini.write_text("[pytest]\n")  # isolate from the caller's project configuration
        modules = [str(CASE_PACKAGES[role] / f"test_{m}.py") for m in CASE_MODULES[role]]
        pytest_args = [*modules, "-c", str(ini), f"--rootdir={workdir}",
                       "-p", "no:cacheprovider", "--import-mode=importlib", "--tb=short" if args.verbose else "--tb=no",
                       "-q" if args.verbose else "-qq", "--disable-warnings", "--assert=plain",
                       # these builtin plugins only cost time here (gc.collect per run, log capture)
                       "-p", "no:unraisableexception", "-p", "no:threadexception", "-p", "no:logging",
                       "-p", "no:junitxml", "-p", "no:pastebin", "-p", "no:doctest"]
        import pytest

        # only our plugin: other installed plugins (hypothesis, benchmark…) cost seconds and add nothing
        saved = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        # SIGTERM (a CI job cancelled) or SIGINT ends the run the way Ctrl-C ends pytest: the case
        # stops, the fixtures tear down and stop every peer, and pytest returns
        try:
            with interruptible() as caught:
                try:
                    main = functools.partial(pytest.main, plugins=[harness])
                    code, output = (main(pytest_args), "") if args.verbose else _quiet(main, pytest_args)
                except Interrupted:  # arrived where pytest does not catch it (its own start or end)
                    code, output = pytest.ExitCode.INTERRUPTED, ""
        finally:
            if saved is None:
                del os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"]
            else:
                os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = saved
        results = list(harness.results)
        if caught.name is not None:
            ignore_further()  # the run is over; a second signal must not end it in a traceback
            print(f"ecp conformance: interrupted by {caught.name} after {len(results)} of {len(selected)} case(s); "
                  "the peers it launched are stopped; no report was written", file=sys.stderr)
            return caught.exit_code
        if int(code) not in (0, 1):
            sys.stderr.write(output)
        # a role may run its cases in another order (its manager's run_phase): reports list the catalogue's
        position = {c.id: k for k, c in enumerate(catalogue)}
        results.sort(key=lambda r: position.get(r.id, len(position)))
        if int(code) not in (0, 1) or (not results and not args.case):
            print(f"ecp conformance: the harness could not run the cases (pytest exit {int(code)}); "
                  "rerun with -v for details", file=sys.stderr)
            return 2
        problems = xf.unmatched(entries, [c.id for c in catalogue])
        if args.update_expected_failures:
            n = xf.rewrite(xf.resolve(args.expected_failures), results, entries, [c.id for c in catalogue])
            print(f"rewrote {xf.resolve(args.expected_failures)}: {n} expected failure(s)")
            problems = []
        summary = RunSummary(role=role, target=target, results=results, strict=args.strict,
                             conformance_level=args.level, problems=problems,
                             duration_s=time.monotonic() - started,
                             launches=harness.launch_records, release=harness.release())
        if harness.stopped is not None:  # the peer never started: the cases after it did not run
            summary.stopped, summary.not_run = harness.stopped, max(0, len(selected) - len(results))
        write_console(summary, sys.stdout)
        try:
            _write_reports(summary, args, entries, under_test)
        except OSError as exc:
            print(f"ecp conformance: cannot write a report: {exc}", file=sys.stderr)
            return 2
        return summary.exit_code
    finally:
        if args.keep_workdir:
            print(f"work dir kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def check_outputs(args: argparse.Namespace) -> None:
    """Before the run starts, every report path is tried: its missing folders are created (as
    pytest's --junit-xml does) and the file is opened for writing (a new one removed again, an
    existing one left as it is until the run ends); a path that fails is a :class:`UsageError`."""
    outputs = [("--json", args.json_path), ("--junit-xml", args.junit_xml), ("--markdown", args.markdown),
               ("--html", args.html), ("--transcripts", args.transcripts), ("--results", args.results)]
    for option, target in outputs:
        if not target:
            continue
        path = Path(target)
        existing = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
        if existing != path.absolute() and not existing.is_dir():
            raise UsageError(f"{option} {target}: cannot be written ({existing} is a file, not a folder)")
        try:
            if option in ("--transcripts", "--results"):  # folders
                path.mkdir(parents=True, exist_ok=True)
                probe = tempfile.NamedTemporaryFile(dir=path)  # removed on close
                probe.close()
                continue
            if path.is_dir():
                raise IsADirectoryError(f"{path} is a directory")
            path.parent.mkdir(parents=True, exist_ok=True)
            existed = path.exists()
            with open(path, "a"):
                pass
            if not existed:
                path.unlink()
        except OSError as exc:
            raise UsageError(f"{option} {target}: cannot be written ({exc.strerror or exc})") from None


def _write_reports(summary: RunSummary, args: argparse.Namespace, entries: list[xf.Entry],
                   release: str | None) -> None:
    """Write every requested report file, creating missing parent folders (as pytest's --junit-xml does)."""
    writers = [(args.json_path, write_json), (args.junit_xml, write_junit),
               (args.markdown, lambda s, p: p.write_text(markdown(s))), (args.html, write_html)]
    for target, write in writers:
        if target:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            write(summary, Path(target))
    if args.transcripts:
        write_transcripts(summary, Path(args.transcripts))
    if args.results:
        from .interop.results import write_results

        write_results(summary, Path(args.results), release=release, entries=entries,
                      expected_failures=args.expected_failures, implementation=args.implementation,
                      implementation_version=args.implementation_version,
                      implementation_commit=args.implementation_commit, machine_name=args.machine)


def _quiet(fn, argv) -> tuple[int, str]:
    """Run pytest with its own output held back (our reports say everything): its exit code and the
    tail of that output, for the caller to show when the harness itself failed."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = fn(argv)
    return code, buf.getvalue()[-4000:]
