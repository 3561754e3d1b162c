"""The explicit-abort cases' call loop (FE-ABORT-8/9): a frontend of several API server processes
aborts what the process that received the call knows (ECP-ABORT-8 sentence 3), so a call that
reached a process with nothing to abort is repeated on a new connection; a frontend of one client
gets exactly one call."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from ecp.conformance.frontend.cases.test_abort import ABORT_ATTEMPTS, _until_some_process_acts
from ecp.conformance.outcomes import CaseTimeout


class _Frontend:
    """What the loop reads of a frontend under test: its INIT's client count and ``until``."""

    def __init__(self, clients: int) -> None:
        addresses = SimpleNamespace(inputs=[f"tcp://127.0.0.1:{5000 + i}" for i in range(clients)])
        self.engines = [SimpleNamespace(init=SimpleNamespace(addresses=addresses))]

    def require_abort_api(self):
        return SimpleNamespace(path="/abort_requests")

    async def until(self, predicate, timeout, what):
        if predicate():
            return True
        raise CaseTimeout(what)


def _play(clients: int, acting_call: int | None) -> tuple[tuple[bool, list[str], int], list[bool]]:
    """Calls answered 200; the ``acting_call``-th (1-based) reaches a process that sends an ABORT."""
    fe, calls = _Frontend(clients), []

    async def call(new_connection: bool):
        calls.append(new_connection)
        return SimpleNamespace(ok=True, status_code=200, text='{"aborted": %d}' % (len(calls) == acting_call))

    result = asyncio.run(_until_some_process_acts(fe, call, lambda: acting_call is not None and len(calls) >= acting_call,
                                                  "an ABORT"))
    return result, calls


def test_several_clients_repeat_the_call_on_new_connections_until_one_process_acts():
    (acted, answers, attempts), calls = _play(clients=2, acting_call=3)
    assert acted and attempts == ABORT_ATTEMPTS
    assert calls == [True, True, True]   # each on a connection of its own, and no call after the one that acted
    assert answers == ["HTTP 200 '{\"aborted\": 0}'"] * 2 + ["HTTP 200 '{\"aborted\": 1}'"]


def test_several_clients_none_acting_is_reported_after_every_attempt():
    (acted, answers, attempts), calls = _play(clients=2, acting_call=None)
    assert not acted and len(calls) == len(answers) == attempts == ABORT_ATTEMPTS


def test_one_client_gets_one_call_on_its_usual_connection():
    (acted, _, attempts), calls = _play(clients=1, acting_call=2)
    assert not acted and attempts == 1 and calls == [False]
