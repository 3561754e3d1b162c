"""Playing one frontend-role session against a freshly launched frontend.

The frontend is launched exactly as the frontend role's cases launch a dedicated one
(:meth:`FrontendManager.fresh`: same placeholders, scripted engines, handshake, health wait and
capability probe), its scripted engines programmed from the session's topology. The engines'
protocol machines (recording mode) judge every frame the frontend sends; at the session's end the
history is judged too:

* every HTTP request ends exactly once: a non-streaming one with a 2xx answer whose choices all
  carry a ``finish_reason``, a stream with exactly one ``finish_reason`` per choice and
  ``data: [DONE]`` (``ECP-HTTP-1``; the engines fail nothing, so no valid request may fail);
* an ABORT names only ids its engine was sent an ADD for (``ECP-ABORT-1``);
* every dropped stream (and every stream named in an explicit abort) is aborted on its engine:
  once the session is over, the engines run exactly the stalled requests of the HTTP requests
  still open (``ECP-ABORT-6``; ``ECP-ABORT-8`` when only explicit aborts are involved), and an
  explicitly aborted stream ends (``ECP-ABORT-8``);
* the explicit-abort and utility routes answer 2xx (``ECP-HTTP-7``, ``ECP-HTTP-1``);
* a request pinned to rank r (``X-data-parallel-rank``) reaches engine r: no engine is sent an ADD
  whose ``data_parallel_rank`` names another rank, and engine r got at least as many ADDs naming
  r as pinned requests to r were answered (``ECP-DP-2``);
* a request its engine ended with ERROR (the session's engines fail longer requests) reaches the
  client as an error, never as a normal finish (``ECP-OUT-5``);
* the frontend serves a fresh request after the session (``ECP-ROB-1``: no wedge).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ..frontend.cases._common import PROMPT_ABORT_S
from ..frontend.cases.test_abort import ABORT_ATTEMPTS
from ..frontend.http_driver import Reply, abort_by_ids
from ..frontend.script import EngineScript
from ..frontend.session import FrontendManager, FrontendUnderTest
from ..frontend.sse import DONE, SseStream, drop_all
from ..outcomes import CaseTimeout, PeerCrashed, CaseFailure
from ..transcript import HTTP_CHANNEL, Transcript
from .execute import LaunchFailed, SessionResult
from .oracle import Finding, binding
from .session import ROUTES, Session

#: the id an explicit abort names for a request never sent (target -1)
UNKNOWN_ID = "cmpl-ecp-explore-never-sent"


@dataclass
class _Request:
    ref: int
    step: int
    stream: bool
    #: stalls on its engine until aborted or released (its max_tokens exceeds the session's hold)
    held: bool
    named: str | None
    #: the global rank named in its X-data-parallel-rank header (None: not pinned)
    pin: int | None = None
    #: its engine ends it with an ERROR output (the session's engines fail longer requests)
    fails: bool = False
    #: served as a chat completion (its response id is its external id; a completion's is ``<id>-0``)
    chat: bool = False
    task: asyncio.Task | None = None
    sse: SseStream | None = None
    reply: Reply | None = None
    #: set on each stream event, on the response head and at the end
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False
    dropped: bool = False
    aborted: bool = False
    #: what went wrong on the client's side (no answer, a broken connection), if anything
    failure: str | None = None

    @property
    def live(self) -> bool:
        return not self.ended and not self.dropped

    @property
    def first(self) -> bool:
        return self.ended or bool(self.sse and self.sse.events)


class _Stop(Exception):
    def __init__(self, finding: Finding) -> None:
        self.finding = finding


class _Judge:
    """How each request of a session ended, judged once the session is over: its findings."""

    fe: FrontendUnderTest
    requests: dict[int, _Request]
    findings: list[Finding]
    step_timeout: float

    def _pins(self) -> None:
        """Pinned requests reached their rank (ECP-DP-2)."""
        answered: dict[int, int] = {}
        for req in self.requests.values():
            if req.pin is not None and req.ended and req.failure is None and not req.dropped and not req.aborted \
                    and (req.reply.ok if req.reply is not None else req.sse is not None and req.sse.done):
                answered[req.pin] = answered.get(req.pin, 0) + 1
        for engine in self.fe.engines:
            adds = [req for _, req in engine.recorder.adds(include_notices=False)]
            strays = [req.request_id for req in adds
                      if req.data_parallel_rank is not None and req.data_parallel_rank != engine.rank]
            if strays:
                self.findings.append(Finding("ECP-DP-2", f"engine {engine.rank} was sent ADDs pinned to another "
                                                         f"rank: {strays[:4]}"))
                return
            mine = sum(1 for req in adds if req.data_parallel_rank == engine.rank)
            if mine < answered.get(engine.rank, 0):
                self.findings.append(Finding("ECP-DP-2", f"{answered[engine.rank]} request(s) pinned to rank "
                                                         f"{engine.rank} (X-data-parallel-rank) were answered, but "
                                                         f"engine {engine.rank} got {mine} ADD(s) with "
                                                         f"data_parallel_rank {engine.rank}"))
                return

    def _aborts_to_owners(self) -> None:
        """Every id an engine is sent in an ABORT is one that engine was sent an ADD for."""
        for engine in self.fe.engines:
            added = {req.request_id for _, req in engine.recorder.adds()}
            for _, ids in engine.recorder.aborts():
                strangers = [rid for rid in ids if rid not in added]
                if strangers:
                    self.findings.append(Finding("ECP-ABORT-1", f"engine {engine.rank} was sent an ABORT naming "
                                                                f"{strangers[:4]}, ids it was never sent an ADD for"))
                    break

    def _judge(self, req: _Request) -> None:
        what = f"request {req.ref} ({'stream' if req.stream else 'non-streaming'}{', aborted' if req.aborted else ''})"
        if req.dropped:
            return
        if not req.ended:
            self.findings.append(Finding("ECP-HTTP-1", f"{what} did not end within {self.step_timeout:g}s of the "
                                                       "session's end", req.step))
            req.task.cancel()
            return
        if req.failure is not None:
            self.findings.append(Finding("ECP-HTTP-1", f"{what}: {req.failure}", req.step))
            return
        if req.aborted:
            if req.sse is not None and req.sse.status_code == 200 and not req.sse.done:
                self.findings.append(Finding("ECP-ABORT-8", f"{what}: the stream ended without data: [DONE] "
                                                            "after its explicit abort", req.step))
            return
        if req.fails:
            self._judge_failed(req, what)
            return
        if not req.stream:
            reply = req.reply
            choices = reply.body.get("choices") if reply.ok and isinstance(reply.body, dict) else None
            if not choices or any(not isinstance(c, dict) or not c.get("finish_reason") for c in choices):
                self.findings.append(Finding("ECP-HTTP-1", f"{what} answered HTTP {reply.status_code}: "
                                                           f"{reply.text[:200]}", req.step))
            return
        sse = req.sse
        if sse.status_code != 200:
            self.findings.append(Finding("ECP-HTTP-1", f"{what} answered HTTP {sse.status_code}: {sse.text[:200]}",
                                         req.step))
            return
        finishes: dict[Any, int] = {}
        for event in sse.events:
            for choice in event.get("choices") or []:
                if isinstance(choice, dict) and choice.get("finish_reason"):
                    finishes[choice.get("index", 0)] = finishes.get(choice.get("index", 0), 0) + 1
        errors = [e for e in sse.events if "error" in e]
        if errors or not sse.done or not finishes or any(n != 1 for n in finishes.values()):
            self.findings.append(Finding("ECP-HTTP-1", f"{what} ended with finish reasons per choice {finishes}, "
                                                       f"{'[DONE]' if sse.done else 'no [DONE]'}"
                                                       f"{f', error event {errors[0]}' if errors else ''}", req.step))

    def _judge_failed(self, req: _Request, what: str) -> None:
        """A request its engine ended with ERROR reaches the client as an error: an error status, an
        error event or finish_reason error, never a normal finish (ECP-OUT-5, as FE-OUT-2 judges it)."""
        if req.reply is not None:
            reply = req.reply
            finish = [c.get("finish_reason") for c in (reply.body.get("choices") or []) if isinstance(c, dict)] \
                if reply.ok and isinstance(reply.body, dict) else []
            if reply.ok and "error" not in finish and not (isinstance(reply.body, dict) and "error" in reply.body):
                self.findings.append(Finding("ECP-OUT-5", f"{what}: its engine ended it with ERROR, the client got "
                                                          f"HTTP {reply.status_code} with finish_reason {finish}",
                                             req.step))
            return
        sse = req.sse
        if sse is None or sse.status_code != 200:
            return  # an error status
        errors = [e for e in sse.events if "error" in e]
        finishes = [c.get("finish_reason") for e in sse.events for c in (e.get("choices") or [])
                    if isinstance(c, dict) and c.get("finish_reason")]
        if not errors and "error" not in finishes and sse.done:
            self.findings.append(Finding("ECP-OUT-5", f"{what}: its engine ended it with ERROR, the stream ended "
                                                      f"normally with finish reasons {finishes}", req.step))


class _Play(_Judge):
    """One session played on the frontend under test, step by step."""

    def __init__(self, fe: FrontendUnderTest, session: Session, step_timeout: float) -> None:
        self.fe = fe
        self.session = session
        self.step_timeout = step_timeout
        self.requests: dict[int, _Request] = {}
        self.findings: list[Finding] = []
        self.sent = 0
        self.step: int | None = None

    # ------------------------------------------------------------------ helpers
    async def _until(self, predicate, what: str, clause: str) -> None:
        try:
            await self.fe.until(predicate, self.step_timeout, what)
        except CaseTimeout as exc:
            raise _Stop(Finding(clause, str(exc), self.step)) from None

    def _body(self, s: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        driver = self.fe.driver
        prompt = " ".join([f"r{s['ref']}"] + ["word"] * max(0, int(s.get("prompt_len", 1)) - 1))
        extra: dict[str, Any] = {"temperature": s.get("temperature", 0.0)}
        chat = s["api"] == "chat" and bool(self.fe.caps and self.fe.caps.chat)
        if s.get("logprobs") is not None:
            extra.update({"logprobs": True, "top_logprobs": s["logprobs"]} if chat else {"logprobs": s["logprobs"]})
        if chat:
            return "/v1/chat/completions", driver.chat_body(prompt, s["max_tokens"], stream=s["stream"], **extra)
        return "/v1/completions", driver.completion_body(prompt, s["max_tokens"], stream=s["stream"], **extra)

    async def _bounded(self, call, what: str) -> Reply:
        """The reply of a plain request that must come within a step timeout."""
        try:
            return await asyncio.wait_for(call, self.step_timeout)
        except (asyncio.TimeoutError, TimeoutError):
            raise _Stop(Finding("ECP-HTTP-1", f"{what}: no answer within {self.step_timeout:g}s", self.step)) from None

    async def _run(self, req: _Request, path: str, body: dict[str, Any], headers: dict[str, str] | None) -> None:
        """One HTTP request from its start to its end (or its drop)."""
        try:
            if not req.stream:
                req.reply = await self.fe.driver.request("POST", path, json_body=body, headers=headers)
                return
            req.sse = await self.fe.driver.open_stream(path, body, headers)
            req.changed.set()
            if req.sse.status_code != 200:
                return
            while True:
                event = await req.sse.next_event(self.step_timeout * 1000)
                req.changed.set()
                if event is None or event == DONE:
                    return
        except (CaseFailure, CaseTimeout, OSError, asyncio.TimeoutError, TimeoutError) as exc:
            if not req.dropped:
                req.failure = f"{type(exc).__name__}: {exc}"
        finally:
            req.ended = True
            req.changed.set()

    # ------------------------------------------------------------------ steps
    async def play(self, i: int, step: dict[str, Any]) -> bool:
        self.step = i
        return await getattr(self, "_" + step["op"])(step)

    async def _request(self, s: dict[str, Any]) -> bool:
        if s["ref"] in self.requests:
            return False
        topo = self.session.topology
        hold, error_after, max_tokens = topo.hold, topo.error_after, int(s["max_tokens"])
        # whichever comes first: the stall (lifted at the session's end, when the engines fail nothing
        # more) or the ERROR
        held = hold is not None and max_tokens > hold and (error_after is None or hold <= error_after)
        fails = error_after is not None and max_tokens > error_after and not held
        pin = None if s.get("pin") is None else self.fe.engines[int(s["pin"]) % len(self.fe.engines)].rank
        req = _Request(s["ref"], self.step, bool(s["stream"]), held, s.get("named"), pin, fails,
                       chat=s["api"] == "chat" and bool(self.fe.caps and self.fe.caps.chat))
        path, body = self._body(s)
        headers = {"X-Request-Id": req.named} if req.named else {}
        if pin is not None:
            headers["X-data-parallel-rank"] = str(pin)
        req.task = asyncio.ensure_future(self._run(req, path, body, headers or None))
        self.requests[req.ref] = req
        self.sent += 1
        return True

    async def _opened(self, req: _Request, first: bool) -> bool:
        """Wait until the stream's head (and, with ``first``, its first event) came; whether it is
        still open then."""
        what = "its first event" if first else "its response head"
        await self._until(lambda: req.ended or (req.sse is not None and (not first or req.first)),
                          f"stream {req.ref}: {what}", "ECP-HTTP-1")
        return not req.ended and req.sse is not None and req.sse.status_code == 200

    async def _drop(self, s: dict[str, Any]) -> bool:
        req = self.requests.get(s["ref"])
        if req is None or not req.stream or not req.live or not await self._opened(req, s.get("after") == "first"):
            return False
        req.dropped = True
        req.sse.drop()
        return True

    async def _crowd(self, s: dict[str, Any]) -> bool:
        first = s.get("after") == "first"
        crowd = []
        for ref in dict.fromkeys(s["refs"]):
            req = self.requests.get(ref)
            if req is not None and req.stream and req.live and await self._opened(req, first):
                crowd.append(req)
        crowd = [req for req in crowd if req.live]  # one may have ended while the others opened
        if len(crowd) < 2:
            return False
        for req in crowd:
            req.dropped = True
        with self.fe.frozen():  # the whole crowd leaves in the same instant, as the frontend sees it
            drop_all([req.sse for req in crowd])
        return True

    async def _abort(self, s: dict[str, Any]) -> bool:
        api = self.fe.caps.abort_api if self.fe.caps else None
        if api is None:
            return False
        ids, targets = [], []
        for ref in s["targets"]:
            if ref == -1:
                ids.append(UNKNOWN_ID)
                continue
            req = self.requests.get(ref)
            # a shared X-Request-Id makes a shared response id: which request it names is the frontend's choice
            if req is None or not req.stream or req.named == "xr-shared" or not req.live \
                    or not await self._opened(req, True) or not req.sse.response_id:
                continue
            # the abort routes take external ids (ECP-HTTP-6): a completion's prompt 0 is `<id>-0`
            ids.append(req.sse.response_id if req.chat else f"{req.sse.response_id}-0")
            targets.append(req)
        if not ids:
            return False
        for req in targets:
            req.aborted = True
        # a frontend of several client processes aborts what the process that received the call
        # owns (ECP-ABORT-8): as FE-ABORT-8, the call is repeated on new connections until every
        # target still running on its engine was aborted there
        init = self.fe.engines[0].init if self.fe.engines else None
        several = init is not None and len(init.addresses.inputs) > 1
        owed = self._running_ids(ids) if several else []
        for attempt in range(ABORT_ATTEMPTS if several else 1):
            reply = await self._bounded(abort_by_ids(self.fe.driver, api, ids, new_connection=several),
                                        f"POST {api.path}")
            self.sent += 1
            if not reply.ok:
                self.findings.append(Finding("ECP-HTTP-7", f"POST {api.path} {ids} answered HTTP "
                                                           f"{reply.status_code}: {reply.text[:200]}", self.step))
                break
            if not owed:
                break
            try:
                await self.fe.until(lambda: all(self._abort_reached(e, rid) for e, rid in owed), PROMPT_ABORT_S,
                                    "the ABORTs of the call")
                break
            except CaseTimeout:
                continue
        # a target whose ABORT never reached its engine was not aborted: no call reached the process
        # that owns it, which ECP-ABORT-8 allows; it is judged as the open request it still is
        missed = {rid for e, rid in owed if not self._abort_reached(e, rid)}
        for req, ext in zip(targets, [i for i in ids if i != UNKNOWN_ID]):
            if any(rid.startswith(ext + "-") for rid in missed):
                req.aborted = False
        return True

    @staticmethod
    def _abort_reached(engine: Any, rid: str) -> bool:
        return rid in engine.generation.aborted_ids or rid not in engine.generation.active

    def _running_ids(self, external_ids: list[str]) -> list[tuple[Any, str]]:
        """(engine, internal id) of every request running on the engines under one of ``external_ids``
        (an internal id is the external id, a dash and a suffix: ECP-FRAME-10)."""
        return [(e, rid) for e in self.fe.engines for rid in list(e.generation.active)
                if any(rid.startswith(ext + "-") for ext in external_ids)]

    async def _route(self, s: dict[str, Any]) -> bool:
        method, path, body, dev = ROUTES[s["route"]]
        if dev and not (self.fe.caps and self.fe.caps.dev_endpoints):
            return False
        reply = await self._bounded(self.fe.driver.request(method, path, json_body=body), f"{method} {path}")
        self.sent += 1
        if not reply.ok:
            self.findings.append(Finding("ECP-HTTP-1", f"{method} {path} answered HTTP {reply.status_code}: "
                                                       f"{reply.text[:200]}", self.step))
        return True

    async def _wait(self, s: dict[str, Any]) -> bool:
        if s["until"] == "idle":
            running = [r for r in self.requests.values() if r.live and not r.held and not r.aborted]
            if not running:
                return False
            await self._until(lambda: all(r.ended for r in running), f"requests {[r.ref for r in running]} to end",
                              "ECP-HTTP-1")
            return True
        req = self.requests.get(s.get("ref", -1))
        if req is None or not req.live or req.aborted:
            return False
        if s["until"] == "first":
            if not req.stream:
                return False
            await self._opened(req, True)
            return True
        if req.held:
            return False  # it runs on only once released, at the session's end
        await self._until(lambda: req.ended, f"request {req.ref} to end", "ECP-HTTP-1")
        return True

    # ------------------------------------------------------------------ the end of a session
    async def epilogue(self) -> None:
        """Let the frontend settle, check that the engines run exactly what the open HTTP requests
        need, release the stalled requests, judge every request's end, then a fresh request."""
        self.step = None
        fe = self.fe
        waiting = [r for r in self.requests.values() if r.live and not r.aborted]

        def active() -> list[str]:
            return [rid for e in fe.engines for rid in e.generation.active]

        def settled() -> bool:
            held = [r for r in waiting if not r.ended and r.held]
            return all(r.ended or r.held for r in waiting) and len(active()) == len(held)

        try:
            await fe.until(settled, self.step_timeout, "the session's requests to settle")
        except CaseTimeout:
            held = [r for r in waiting if not r.ended and r.held]
            if len(active()) > len(held):
                gone = [r.ref for r in self.requests.values() if r.dropped or r.aborted]
                dropped = any(r.dropped for r in self.requests.values())
                self.findings.append(Finding(
                    "ECP-ABORT-6" if dropped else "ECP-ABORT-8",
                    f"{len(active())} request(s) still run on the engines ({active()[:6]}) while only "
                    f"{len(held)} open HTTP request(s) wait for stalled ones; requests {gone} were dropped or "
                    f"explicitly aborted and not every one was aborted on its engine"))
        for engine in fe.engines:
            engine.script.hold_after = None
            engine.script.error_after = None
            engine.release()
        tasks = [r.task for r in self.requests.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=self.step_timeout)
        for req in self.requests.values():
            self._judge(req)
        self._aborts_to_owners()
        self._pins()
        await self._fresh()

    async def _fresh(self) -> None:
        try:
            reply = await asyncio.wait_for(self.fe.driver.complete("ecp explore fresh", 2), self.step_timeout)
        except (CaseFailure, CaseTimeout, asyncio.TimeoutError, TimeoutError) as exc:
            self.findings.append(Finding("ECP-ROB-1", f"after the session the frontend did not serve a fresh "
                                                      f"request: {exc}"))
            return
        choices = reply.body.get("choices") if reply.ok and isinstance(reply.body, dict) else None
        if not choices or not choices[0].get("finish_reason"):
            self.findings.append(Finding("ECP-ROB-1", f"after the session a fresh request was answered HTTP "
                                                      f"{reply.status_code}: {reply.text[:200]}"))


def scripts_for(session: Session) -> list[EngineScript]:
    """One script per scripted engine, from the session's topology."""
    topo = session.topology
    # logprobs as asked: an engine that leaves out logprobs a request asked for breaks ECP-HS-4
    # (it must declare that it lacks them), and a frontend may then fail the request
    return [EngineScript(hold_after=topo.hold, step_delay_s=topo.delay_ms / 1000, abort_outputs=topo.abort_outputs,
                         error_after=topo.error_after, output_form=topo.form, logprobs_asked=True)
            for _ in range(topo.engines)]


def play_frontend(session: Session, manager: FrontendManager, step_timeout: float = 10.0) -> SessionResult:
    """Launch a frontend with the session's scripted engines, play the session, judge it, stop it.

    Raises :class:`LaunchFailed` when the frontend does not come up."""
    transcript = Transcript(max_entries=2000)
    manager.transcript = transcript
    topo = session.topology
    findings: list[Finding] = []
    played: list[int] = []
    times = {"launch": 0.0, "run": 0.0}
    log = [""]

    async def body(m: FrontendManager) -> None:
        started = time.monotonic()
        try:
            launch = m.fresh(engine_count=topo.engines, scripts=scripts_for(session))
            fe = await launch.__aenter__()
        except (CaseTimeout, PeerCrashed, CaseFailure, OSError, Exception) as exc:  # noqa: BLE001
            raise LaunchFailed(f"{type(exc).__name__}: {exc}") from exc
        times["launch"] = time.monotonic() - started
        run = _Play(fe, session, step_timeout)
        marks: list[tuple[int, int | None]] = []

        def violations() -> list:
            return [v for e in fe.engines for v in e.violations]

        try:
            try:
                for i, step in enumerate(session.steps):
                    marks.append((len(violations()), i))
                    if await run.play(i, step):
                        played.append(i)
                marks.append((len(violations()), None))
                await run.epilogue()
            except _Stop as stop:
                run.findings.append(stop.finding)
            except PeerCrashed as exc:
                run.findings.append(Finding("ECP-ROB-1", f"the frontend died: {exc}", run.step))
            except (CaseFailure, CaseTimeout) as exc:
                run.findings.append(Finding(getattr(exc, "clause", None) or "ECP-HTTP-1", str(exc), run.step))
            await fe.quiet()
            machine = []
            for k, v in enumerate(violations()):
                step = next((s for n, s in reversed(marks) if n <= k), None)
                machine.append(Finding(v.clause, f"engine {v.rank} {v.socket}: {v.error}", step))
            findings.extend(machine + run.findings)
            if findings:
                log[0] = fe.log_tail()
        finally:
            for req in run.requests.values():
                if req.sse is not None:
                    req.sse.drop()
                if req.task is not None:
                    req.task.cancel()
            await launch.__aexit__(None, None, None)
            times["run"] = time.monotonic() - started - times["launch"]

    # every step and the epilogue's stages wait at most a step timeout each
    bound = step_timeout * (len(session.steps) + 6)
    manager.set_deadline(time.monotonic() + bound)
    try:
        manager.run(body)
    except CaseTimeout as exc:
        findings.append(Finding("ECP-HTTP-1", f"the session did not end within {bound:g}s: {exc}"))
    findings = binding(findings, manager.release.layout)  # the rules of the release its engines speak
    entries = list(transcript.entries)
    # the harness's engines send outputs and receive the frontend's frames
    sent = sum(1 for e in entries if e.direction == "sent" and e.channel != HTTP_CHANNEL)
    received = sum(1 for e in entries if e.direction == "recv" and e.channel != HTTP_CHANNEL)
    return SessionResult(findings, entries, played, sent, received, times["launch"], times["run"], log[0])
