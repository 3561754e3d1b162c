"""pytest plugin of the conformance harness (``pytest11`` entry point ``ecp_conformance``).

Inert unless pytest runs with ``--ecp-config FILE`` (the JSON written by
``ecp conformance <role>``), so loading it into the project's own test runs
changes nothing. When active it:

* checks the case registry at collection time (duplicate ids, unknown
  clauses, catalogue entries without a test, tests citing unknown ids);
* deselects cases not matching the ``cases`` patterns of the config;
* gives each case a time budget and a fresh transcript section;
* classifies each case as PASS / FAIL / TIMEOUT / CRASH / UNSUPPORTED /
  ERROR and writes every :class:`~ecp.conformance.outcomes.CaseResult` to
  the config's ``results_path`` (JSON lines) for the runner's reports.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from .registry import MARKER

_STATE_KEY = pytest.StashKey["RunState"]()

#: role -> (module, manager class, config class) of the peer manager of that role. A peer
#: manager starts/stops the peers under test and offers begin_case(), plan(ids) (the ids of the
#: selected cases that follow the current one), optionally a static run_phase(case) -> int (the order the
#: cases run in, phase by phase), case_budget() (seconds, ecp.conformance.pace), set_deadline(t),
#: case_crashed(), after_failure() (keep or drop the peers a failed case used; evidence or None),
#: mark_dirty(), mark_broken(), log_tail(), launches() (the launch records) and close() to this plugin.
PEER_MANAGERS: dict[str, tuple[str, str, str]] = {
    "engine": ("ecp.conformance.engine.session", "EngineManager", "EngineRunConfig"),
    "frontend": ("ecp.conformance.frontend.session", "FrontendManager", "FrontendRunConfig"),
}
#: role -> module with that role's fixtures, registered as a plugin when the role runs
ROLE_FIXTURES: dict[str, str] = {
    "engine": "ecp.conformance.engine.fixtures",
    "frontend": "ecp.conformance.frontend.fixtures",
}


class RunState:
    """Per-run state of an active harness."""

    def __init__(self, config: dict[str, Any]) -> None:
        from .registry import load_role
        from .release import ReleaseWatch
        from .transcript import Transcript

        self.config = config
        self.role: str = config["role"]
        self.catalogue = {c.id: c for c in load_role(self.role)}
        self.transcript = Transcript()
        #: which release the peer speaks, from its traffic; written to ``release_path`` at the end
        self.release = ReleaseWatch(self.role, config.get("under_test") or "", _profile_under_test(config))
        self.transcript.observer = self.release.observe
        self.results_path = Path(config["results_path"])
        self.results_path.write_text("")
        self.patterns: list[str] = config.get("cases") or []
        self.manager: Any = None
        self._case_started: dict[str, float] = {}
        #: (node id, case id) of the selected cases in run order (the managers plan launches ahead with it)
        self.order: list[tuple[str, str]] = []
        #: cases that have a result
        self.done = 0

    def selected(self, case_id: str) -> bool:
        if not self.patterns:
            return True
        slug = self.catalogue[case_id].slug
        return any(fnmatch.fnmatchcase(case_id, p) or fnmatch.fnmatchcase(slug, p) for p in self.patterns)

    def peer_manager(self) -> Any:
        """The role's peer manager, created on first use."""
        if self.manager is None:
            module, manager_cls, config_cls = PEER_MANAGERS[self.role]
            mod = importlib.import_module(module)
            cfg = getattr(mod, config_cls)(**self.config[self.role])
            self.manager = getattr(mod, manager_cls)(cfg, self.transcript)
        return self.manager


def _profile_under_test(config: dict[str, Any]) -> Any:
    """The profile ``--vllm`` named (``None`` for ``auto``, chosen from traffic later)."""
    from ecp.spec.layout.model import LayoutError
    from ecp.spec.profile import resolve_profile

    reference = (config.get(config["role"]) or {}).get("vllm")
    if not reference or reference == "auto":
        return None
    try:
        return resolve_profile(reference)
    except LayoutError:
        return None  # the command checked it; a fingerprint is never a reason to fail a run


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ecp-conformance", "ecp conformance harness")
    group.addoption("--ecp-config", default=None, metavar="FILE",
                    help="run the conformance cases with this harness config (written by `ecp conformance`)")


def state_of(config: pytest.Config) -> RunState | None:
    """The active run's state (None when the harness is inert)."""
    return config.stash.get(_STATE_KEY, None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(id): the conformance case a test implements")
    path = config.getoption("--ecp-config", None)
    if path:
        state = RunState(json.loads(Path(path).read_text()))
        config.stash[_STATE_KEY] = state
        config.pluginmanager.import_plugin(ROLE_FIXTURES[state.role])


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = state_of(session.config)
    if state is not None and state.config.get("release_path"):
        data = state.release.to_dict()
        chosen = getattr(state.manager, "release_under_test", None)  # a role whose harness speaks a release
        if chosen is not None:
            data.update(chosen.to_dict())
        Path(state.config["release_path"]).write_text(json.dumps(data))


def pytest_unconfigure(config: pytest.Config) -> None:
    state = state_of(config)
    if state is not None and state.manager is not None:
        try:
            state.manager.close()
        finally:
            path = state.config.get("launches_path")
            if path:
                Path(path).write_text(json.dumps(state.manager.launches()))


def _case_id(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker(MARKER)
    return mark.args[0] if mark else None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = state_of(config)
    if state is None:
        return
    from .registry import check_implementations

    implemented: dict[str, list[str]] = {}
    for item in items:
        cid = _case_id(item)
        if cid is None:
            raise pytest.UsageError(f"{item.nodeid}: a conformance test without @case(...)")
        implemented.setdefault(cid, []).append(item.nodeid)
    try:
        check_implementations(state.catalogue.values(), implemented)
    except Exception as exc:  # RegistryError: surfaced as a usage error (exit 2 from the runner)
        raise pytest.UsageError(str(exc)) from None
    keep = [i for i in items if state.selected(_case_id(i))]  # type: ignore[arg-type]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    # the role's manager may run the cases in phases (its run_phase(case) -> int; a stable sort keeps
    # the catalogue order within each): only the order of execution changes, never the reports'
    module, manager_cls, _ = PEER_MANAGERS[state.role]
    phase = getattr(getattr(importlib.import_module(module), manager_cls), "run_phase", None)
    if phase is not None:
        items.sort(key=lambda i: phase(state.catalogue[_case_id(i)]))  # type: ignore[index]
    state.order = [(i.nodeid, _case_id(i)) for i in items]


# ---------------------------------------------------------------------- per case
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    state = state_of(item.config)
    if state is None:
        return
    cid = _case_id(item)
    state.transcript.start_case(cid or item.nodeid)
    state._case_started[item.nodeid] = time.monotonic()
    manager = state.peer_manager()
    manager.begin_case()
    nodeids = [nodeid for nodeid, _ in state.order]
    if item.nodeid in nodeids:
        manager.plan([cid for _, cid in state.order[nodeids.index(item.nodeid) + 1:]])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    state = state_of(item.config)
    if state is None:
        return
    manager = state.peer_manager()
    cid = _case_id(item)
    if cid is not None:
        _require_release(state.catalogue[cid], manager.release_layout())
    manager.set_deadline(time.monotonic() + manager.case_budget())


def _require_release(case: Any, layout: Any) -> None:
    """Raise :class:`~.outcomes.Unsupported` when the release under test lacks a feature the case's
    clause needs (:data:`ecp.spec.clauses.RELEASE_BOUND`): the clause does not bind a peer of it."""
    from ecp.spec.clauses import CLAUSES
    from ecp.spec.releases import describe

    from .outcomes import Unsupported

    clause = CLAUSES.get(case.clause)
    missing = clause.missing_in(layout) if clause is not None else ()
    if missing:
        raise Unsupported(f"{', '.join(describe(f) for f in missing)}: not in {_label(layout)} "
                          f"({case.clause} binds only the releases that have it)")


def _label(layout: Any) -> str:
    from ecp.spec.profile import release_of

    return f"vLLM {release_of(layout)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    state = state_of(item.config)
    if state is None:
        return
    report = outcome.get_result()
    cid = _case_id(item)
    if cid is None:
        return
    # one result per case: the call phase, or the setup phase when it failed
    if call.when == "call" or (call.when == "setup" and call.excinfo is not None):
        result = _classify(state, cid, call, item)
        with open(state.results_path, "a") as f:
            f.write(json.dumps(result.to_dict()) + "\n")
        report.ecp_outcome = result.outcome.value  # type: ignore[attr-defined]
        state.done += 1
        if state.config.get("progress"):
            _progress(result, len(state.order) - state.done)
        _stop_if_never_started(state, call, item, result)


#: beside the results file: why the run stopped before its last case (read by the runner)
STOPPED_FILE = "stopped.txt"


def _stop_if_never_started(state: RunState, call: pytest.CallInfo, item: pytest.Item, result) -> None:
    """The peer's command exits before any handshake of the run (:class:`PeerNeverStarted`): this case
    reported it; stop the run (pytest's ``shouldfail``: exit 1, no case after it runs) and leave the
    reason, with the peer's last output, for the runner's one line."""
    from .outcomes import PeerNeverStarted

    if call.excinfo is None or not isinstance(call.excinfo.value, PeerNeverStarted):
        return
    exc = call.excinfo.value
    tail = [ln.strip() for ln in (exc.output or (result.peer_stderr_tail or "").splitlines())
            if ln.strip() and not ln.startswith("$ ")][-4:]  # ("$ COMMAND": the launcher's own first line)
    status = f"with status {exc.exit_status} " if exc.exit_status is not None else ""
    reason = f"the {state.role} command exited {status}before its first handshake (reported by {result.id})"
    if tail:
        reason += "; its last output: " + " | ".join(tail)
    state.results_path.with_name(STOPPED_FILE).write_text(reason)
    item.session.shouldfail = reason


def _progress(result: Any, left: int) -> None:
    """One line per case as it ends, on stderr (stdout holds the summary): a person watching the run
    sees it move, and which case is slow. The outcome is the case's own: expected failures are
    applied in the summary."""
    sys.stderr.write(f"  {result.id:<13} {result.outcome.value:<11} {result.duration_s:6.2f} s   {left} left\n")
    sys.stderr.flush()


def _classify(state: RunState, cid: str, call: pytest.CallInfo, item: pytest.Item):
    from .launch import LaunchError
    from .outcomes import CaseResult, CaseTimeout, FailedClosed, Outcome, PeerCrashed, Unsupported
    from .transcript import render

    case = state.catalogue[cid]
    exc = call.excinfo.value if call.excinfo else None
    manager = state.manager
    crashed = manager is not None and manager.case_crashed()
    fail_closed = isinstance(exc, FailedClosed) or (
        crashed and bool(getattr(manager, "failed_closed", lambda: False)()))
    clause = case.clause
    if isinstance(exc, Unsupported):
        outcome, message = Outcome.UNSUPPORTED, str(exc)
    elif fail_closed and not isinstance(exc, LaunchError):
        # ENGINE_CORE_DEAD: the engine stopped, but told its frontend (ECP-OUT-8) -- the case's own
        # requirement failed; this is not a silent crash
        detail = getattr(manager, "death_detail", lambda: "")()
        outcome = Outcome.FAIL
        what = "the engine sent ENGINE_CORE_DEAD"
        if isinstance(exc, FailedClosed):
            what = str(exc)
        elif isinstance(exc, AssertionError):
            clause = getattr(exc, "clause", None) or clause
            what = f"{exc}; then the engine sent ENGINE_CORE_DEAD"
        message = f"fail-closed: {what}{'; ' + detail if detail else ''} -- it stopped instead of serving on"
    elif isinstance(exc, PeerCrashed) or (crashed and not isinstance(exc, LaunchError)):
        outcome = Outcome.CRASH
        message = str(exc) if exc is not None else f"the {state.role} process died during the case"
        if exc is not None and not isinstance(exc, PeerCrashed):
            message = f"the {state.role} process died during the case ({exc})"
    elif exc is None:
        outcome, message = Outcome.PASS, ""
    elif isinstance(exc, CaseTimeout):
        outcome, message = Outcome.TIMEOUT, str(exc)
    elif isinstance(exc, AssertionError):
        outcome, message = Outcome.FAIL, str(exc)
        clause = getattr(exc, "clause", None) or clause
    elif isinstance(exc, LaunchError):
        outcome, message = Outcome.ERROR, f"cannot start the peer: {exc}"
    else:
        outcome = Outcome.ERROR
        message = f"harness error: {exc!r}\n" + "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__, limit=6))
    # every message of the case went through the protocol machine: what it recorded outside the
    # case's own focus is a finding of its own; a MUST finding fails a case that otherwise passed
    findings: list[dict[str, Any]] = []
    failed_by_findings = False
    if manager is not None and hasattr(manager, "violations"):
        from .outcomes import findings_of

        findings = findings_of(manager.violations(), {case.clause, clause})
        must = [f for f in findings if f["level"] == "MUST"]
        if outcome is Outcome.PASS and must:
            outcome, clause, failed_by_findings = Outcome.FAIL, must[0]["clause"], True
            shown = [f"[{f['clause']}] {f['message']}" for f in must[:3]]
            more = f" (and {len(must) - 3} more, listed under findings)" if len(must) > 3 else ""
            message = (f"the case's own check passed, but the {state.role} broke other rules: "
                       + "; ".join(shown) + more)
    uncited = getattr(manager, "uncited_routes", None)
    routes = uncited(case.clauses) if uncited is not None else []
    if routes and outcome is not Outcome.UNSUPPORTED:
        outcome = Outcome.ERROR
        message = (f"harness error: {cid} drove HTTP routes whose clause its catalogue entry does not cite: "
                   f"{', '.join(routes)}" + (f"\n(the case itself: {message})" if message else ""))
    failed = outcome not in (Outcome.PASS, Outcome.UNSUPPORTED)
    if failed and manager is not None and outcome is not Outcome.ERROR:
        # keep the engines that still serve; the probe's verdict is evidence for this case
        note = manager.after_failure()
        if note and outcome is Outcome.TIMEOUT:
            # the peer went silent: a FAIL of the case's requirement with the probe as evidence,
            # not a harness wait that ran out
            outcome, message = Outcome.FAIL, f"{message}; {note}"
        elif note:
            message = f"{message}\n{note}"
    strict = bool(state.config.get("strict"))
    # the result is judged at the level of the clause it cites: the case's own (which may override its
    # clause's), or the clause a CaseFailure names instead
    from ecp.spec import clauses as spec_clauses

    conformance_level = (case.conformance_level if clause == case.clause
                         else spec_clauses.get(clause).conformance_level)
    run_level = state.config.get("level", "hardened")
    required = spec_clauses.CONFORMANCE_LEVELS.index(conformance_level) <= \
        spec_clauses.CONFORMANCE_LEVELS.index(run_level)
    # a crash (death without ENGINE_CORE_DEAD) always counts: it breaks ECP-OUT-8 at every level
    # a MUST finding outside the case's focus blocks like a MUST case, at its own clause's level
    blocking = outcome is Outcome.CRASH or (required and (case.level == "MUST" or strict or failed_by_findings))
    entries = state.transcript.case_entries()
    if outcome is Outcome.ERROR and manager is not None:
        # the harness broke mid-case: the peer's state is unknown
        manager.mark_broken()
    return CaseResult(
        id=cid, clause=clause, level=case.level, conformance_level=conformance_level, slug=case.slug,
        requirement=case.requirement,
        role=state.role, outcome=outcome, message=message, blocking=blocking,
        duration_s=time.monotonic() - state._case_started.get(item.nodeid, time.monotonic()),
        transcript=[e.to_dict() for e in entries] if failed else [],
        transcript_text=render(entries) if failed else "",
        peer_stderr_tail=(manager.log_tail() if failed and manager is not None else ""),
        findings=findings,
    )


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    """Silence pytest's own progress letters for cases; the runner prints its own lines."""
    if state_of(config) is None:
        return None
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        oc = getattr(report, "ecp_outcome", None)
        if oc is not None:
            return report.outcome, "", oc
    if report.when in ("setup", "teardown"):
        return report.outcome, "", ""
    return None
