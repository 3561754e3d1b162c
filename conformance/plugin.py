"""The pytest plugin of the conformance harness: one :class:`Harness` object per run.

The runner builds it with what the run declared (:class:`RunSpec`) and hands it to ``pytest.main``
in-process (``plugins=[harness]``); the results come back on the object, never through a file. It

* checks the case registry at collection time (duplicate ids, unknown clauses, catalogue entries
  without a test, tests citing unknown ids);
* deselects cases not matching the run's ``--case`` patterns and orders the rest by the peer
  manager's ``run_phase``;
* gives each case a time budget and a fresh transcript section, and provides the role's fixtures;
* hands what each case observed and what the run declared to :func:`.outcomes.decide`, the one
  writer of outcomes, and keeps the :class:`~.outcomes.CaseResult` it returns.

The peer manager is chosen by type: the runner passes the role's :class:`PeerManager` class.
"""

from __future__ import annotations

import fnmatch
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Iterable, Protocol

import pytest

from .registry import MARKER


class PeerManager(Protocol):
    """What the harness asks of a role's peer manager (``EngineManager``, ``FrontendManager``): it starts
    and stops the peers under test and reports what became of them."""

    #: the role whose peers it manages, and its run configuration (built from the role's options)
    role: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, cfg: Any, transcript: Any) -> None: ...

    @staticmethod
    def run_phase(case: Any) -> int:
        """The order the cases run in, phase by phase (reports keep the catalogue order)."""

    def release_layout(self) -> Any:
        """The layout of the release under test."""

    def release_facts(self) -> dict[str, Any]:
        """What the report says about the release it chose (empty: nothing beyond the fingerprint)."""

    def begin_case(self) -> None: ...

    def plan(self, upcoming: list[str]) -> None:
        """The ids of the selected cases that follow the current one (launches started ahead)."""

    def case_budget(self) -> float: ...

    def set_deadline(self, deadline: float | None) -> None: ...

    def case_crashed(self) -> bool:
        """Whether a peer the case used died during it."""

    def failed_closed(self) -> bool:
        """Whether, of those, an engine announced its death with ENGINE_CORE_DEAD."""

    def death_detail(self) -> str:
        """How the peers the case used exited (for a fail-closed message)."""

    def violations(self) -> list[Any]:
        """What the protocol machines recorded against the peers the case used, since it began."""

    def uncited_routes(self, cited: Iterable[str]) -> list[str]:
        """HTTP routes the case drove whose clause is not among ``cited``."""

    def after_failure(self) -> str | None:
        """A case failed: keep or drop the peers it used; what the health probe found, or None."""

    def mark_broken(self) -> None: ...

    def log_tail(self) -> str: ...

    def launches(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass
class RunSpec:
    """What a run declares to the harness (from ``ecp conformance <role>``'s options)."""

    manager: type[PeerManager]
    #: the role's section: the keyword arguments of ``manager.Config``
    peer_config: dict[str, Any]
    patterns: list[str] = field(default_factory=list)
    strict: bool = False
    level: str = "hardened"
    #: the release ``--vllm`` named (None: ``auto``, chosen from traffic)
    under_test: str | None = None
    #: the expected-failures entries (``ecp.conformance.expected.Entry``) and ``--update-expected-failures``
    expected: list[Any] = field(default_factory=list)
    update_expected: bool = False
    #: a line per case on stderr as it ends
    progress: bool = True


def _case_id(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker(MARKER)
    return mark.args[0] if mark else None


class Harness:
    """The plugin object of one run; what it found stays on it for the runner."""

    def __init__(self, spec: RunSpec) -> None:
        from .registry import load_role
        from .release import ReleaseWatch
        from .transcript import Transcript

        self.spec = spec
        self.role: str = spec.manager.role
        self.catalogue = {c.id: c for c in load_role(self.role)}
        self.transcript = Transcript()
        #: which release the peer speaks, from its traffic
        self.watch = ReleaseWatch(self.role, spec.under_test or "", _profile_under_test(spec.peer_config))
        self.transcript.observer = self.watch.observe
        self.manager: PeerManager | None = None
        #: (node id, case id) of the selected cases in run order (the managers plan launches ahead with it)
        self.order: list[tuple[str, str]] = []
        self._started: dict[str, float] = {}
        #: node id -> what the release under test lacks that the case's clause needs (outcomes.release_gap)
        self._gaps: dict[str, str | None] = {}
        # what the runner reads back
        self.results: list[Any] = []
        #: why the run stopped before its last case (the peer never started), or None
        self.stopped: str | None = None
        self.launch_records: dict[str, Any] | None = None

    def selected(self, case_id: str) -> bool:
        if not self.spec.patterns:
            return True
        slug = self.catalogue[case_id].slug
        return any(fnmatch.fnmatchcase(case_id, p) or fnmatch.fnmatchcase(slug, p) for p in self.spec.patterns)

    def peer_manager(self) -> PeerManager:
        """The role's peer manager, created on first use."""
        if self.manager is None:
            cls = self.spec.manager
            self.manager = cls(cls.Config(**self.spec.peer_config), self.transcript)
        return self.manager

    def release(self) -> dict[str, Any]:
        """The peer's release fingerprint and, where the role chose one, the release under test."""
        data = self.watch.to_dict()
        if self.manager is not None:
            data.update(self.manager.release_facts())
        return data

    # ------------------------------------------------------------------ fixtures of the cases
    def _role_manager(self, role: str) -> PeerManager:
        if self.role != role:
            pytest.fail(f"{role}-role cases run only in a {role}-role run")
        return self.peer_manager()

    @pytest.fixture
    def engines(self) -> Any:
        """The :class:`~ecp.conformance.engine.session.EngineManager` of this run."""
        return self._role_manager("engine")

    @pytest.fixture
    def engine(self, engines: Any) -> Any:
        """The shared engine's :class:`~ecp.conformance.engine.harness_frontend.HarnessFrontend`."""
        return engines.shared().fe

    @pytest.fixture
    def frontends(self) -> Any:
        """The :class:`~ecp.conformance.frontend.session.FrontendManager` of this run."""
        return self._role_manager("frontend")

    # ------------------------------------------------------------------ the run
    def pytest_configure(self, config: pytest.Config) -> None:
        config.addinivalue_line("markers", f"{MARKER}(id): the conformance case a test implements")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.manager is not None:
            try:
                self.manager.close()
            finally:
                self.launch_records = self.manager.launches()

    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        from .registry import check_implementations

        implemented: dict[str, list[str]] = {}
        for item in items:
            cid = _case_id(item)
            if cid is None:
                raise pytest.UsageError(f"{item.nodeid}: a conformance test without @case(...)")
            implemented.setdefault(cid, []).append(item.nodeid)
        try:
            check_implementations(self.catalogue.values(), implemented)
        except Exception as exc:  # RegistryError: surfaced as a usage error (exit 2 from the runner)
            raise pytest.UsageError(str(exc)) from None
        keep = [i for i in items if self.selected(_case_id(i))]  # type: ignore[arg-type]
        dropped = [i for i in items if i not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
        # the role's manager runs the cases in phases (a stable sort keeps the catalogue order within
        # each): only the order of execution changes, never the reports'
        phase = self.spec.manager.run_phase
        items.sort(key=lambda i: phase(self.catalogue[_case_id(i)]))  # type: ignore[index]
        self.order = [(i.nodeid, _case_id(i)) for i in items]  # type: ignore[misc]

    # ------------------------------------------------------------------ per case
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        cid = _case_id(item)
        self.transcript.start_case(cid or item.nodeid)
        self._started[item.nodeid] = time.monotonic()
        manager = self.peer_manager()
        manager.begin_case()
        nodeids = [nodeid for nodeid, _ in self.order]
        if item.nodeid in nodeids:
            manager.plan([c for _, c in self.order[nodeids.index(item.nodeid) + 1:]])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        from .outcomes import release_gap

        manager = self.peer_manager()
        cid = _case_id(item)
        if cid is not None:
            self._gaps[item.nodeid] = release_gap(self.catalogue[cid], manager.release_layout())
        manager.set_deadline(time.monotonic() + manager.case_budget())

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        """A case whose clause the release under test does not have is not run (its verdict says why)."""
        return True if self._gaps.get(pyfuncitem.nodeid) else None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        cid = _case_id(item)
        if cid is None:
            return
        # one result per case: the call phase, or the setup phase when it failed
        if call.when == "call" or (call.when == "setup" and call.excinfo is not None):
            result = self._judge(cid, call, item)
            self.results.append(result)
            report.ecp_outcome = result.outcome.value  # type: ignore[attr-defined]
            if self.spec.progress:
                _progress(result, len(self.order) - len(self.results))
            self._stop_if_never_started(call, item, result)

    def _judge(self, cid: str, call: pytest.CallInfo, item: pytest.Item) -> Any:
        """Hand what the case observed and what the run declared to :func:`.outcomes.decide`; gather the
        facts only some rows need (how a failed-closed peer exited, the probe after a failure) when the
        case's own verdict shows those rows apply."""
        from . import expected as xf
        from .outcomes import Declared, Evidence, Observed, Outcome, decide, findings_of
        from .transcript import render

        case = self.catalogue[cid]
        exc = call.excinfo.value if call.excinfo else None
        manager = self.manager
        crashed = manager is not None and manager.case_crashed()
        seen = Observed.of(exc, crashed=crashed, failed_closed=crashed and manager.failed_closed())  # type: ignore[union-attr]
        if manager is not None:
            seen = replace(seen, findings=tuple(findings_of(manager.violations(), {case.clause, seen.clause})),
                           uncited_routes=tuple(manager.uncited_routes(case.clauses)))
        run = Declared(role=self.role, level=self.spec.level, strict=self.spec.strict,
                       release_gap=self._gaps.get(item.nodeid), expected=xf.entry_for(cid, self.spec.expected),
                       update_expected=self.spec.update_expected)
        own = decide(case, seen, run.own())
        if manager is not None and own.rows[0] == "fail-closed":
            seen = replace(seen, death=manager.death_detail())
        if manager is not None and own.outcome.is_failure:
            # keep the peers that still serve; the probe's finding is evidence for this case
            seen = replace(seen, probe=manager.after_failure())
        failed = own.outcome not in (Outcome.PASS, Outcome.UNSUPPORTED)
        if own.outcome is Outcome.ERROR and manager is not None:
            manager.mark_broken()  # the harness broke mid-case: the peer's state is unknown
        entries = self.transcript.case_entries() if failed else []
        evidence = Evidence(
            duration_s=time.monotonic() - self._started.get(item.nodeid, time.monotonic()),
            transcript=[e.to_dict() for e in entries], transcript_text=render(entries) if failed else "",
            peer_stderr_tail=manager.log_tail() if failed and manager is not None else "")
        return decide(case, seen, run, evidence)

    def _stop_if_never_started(self, call: pytest.CallInfo, item: pytest.Item, result: Any) -> None:
        """The peer's command exits before any handshake of the run (:class:`PeerNeverStarted`): this case
        reported it; stop the run (pytest's ``shouldfail``: exit 1, no case after it runs) and keep the
        reason, with the peer's last output, for the runner's one line."""
        from .outcomes import PeerNeverStarted

        if call.excinfo is None or not isinstance(call.excinfo.value, PeerNeverStarted):
            return
        exc = call.excinfo.value
        tail = [ln.strip() for ln in (exc.output or (result.peer_stderr_tail or "").splitlines())
                if ln.strip() and not ln.startswith("$ ")][-4:]  # ("$ COMMAND": the launcher's own first line)
        status = f"with status {exc.exit_status} " if exc.exit_status is not None else ""
        reason = f"the {self.role} command exited {status}before its first handshake (reported by {result.id})"
        if tail:
            reason += "; its last output: " + " | ".join(tail)
        self.stopped = reason
        item.session.shouldfail = reason

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config):
        """Silence pytest's own progress letters for cases; the runner prints its own lines."""
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            oc = getattr(report, "ecp_outcome", None)
            if oc is not None:
                return report.outcome, "", oc
        if report.when in ("setup", "teardown"):
            return report.outcome, "", ""
        return None


def _profile_under_test(peer_config: dict[str, Any]) -> Any:
    """The profile ``--vllm`` named (``None`` for ``auto``, chosen from traffic later)."""
    from ecp.spec.layout.model import LayoutError
    from ecp.spec.profile import resolve_profile

    reference = peer_config.get("vllm")
    if not reference or reference == "auto":
        return None
    try:
        return resolve_profile(reference)
    except LayoutError:
        return None  # the command checked it; a fingerprint is never a reason to fail a run


def _progress(result: Any, left: int) -> None:
    """One line per case as it ends, on stderr (stdout holds the summary): a person watching the run
    sees it move, and which case is slow. The outcome is the case's verdict, expected failures applied."""
    sys.stderr.write(f"  {result.id:<13} {result.outcome.value:<11} {result.duration_s:6.2f} s   {left} left\n")
    sys.stderr.flush()
