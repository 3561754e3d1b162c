"""End to end: `ecp serve` (frontend only, external engines) -> `ecp monitor` -> two `ecp engine`
ranks, all processes, over tcp; real HTTP traffic; the report at exit; replay of the capture."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from ecp.conformance.monitor.capture import read_capture
from ecp.conformance.monitor.observed import Observed
from ecp.spec import EngineDeadSentinel, decode_input, decode_outputs

from .procs import Deployment, replay

pytestmark = pytest.mark.slow

BURST = 40


def _complete(http: httpx.Client, **body) -> dict:
    r = http.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 5, **body})
    assert r.status_code == 200, r.text
    return r.json()


async def _dropped_streams(url: str, n: int) -> None:
    """Open n long streams, read each one's first chunk, then drop them all."""
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=httpx.Limits(max_connections=n)) as client:
        async def one(i: int) -> None:
            async with client.stream("POST", "/v1/completions", json={
                    "prompt": "Hello", "max_tokens": 3000, "stream": True, "ignore_eos": True}) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        return  # leaving the block drops the stream
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n))), 60)


def _drive(d: Deployment) -> dict[str, int]:
    """Completions, an abort through the API, a burst of dropped streams, a rejection notice
    (abort_immediately) and sleep/wake; returns the engine requests it caused."""
    http = d.http
    for _ in range(3):
        assert _complete(http)["choices"][0]["finish_reason"] == "length"
    out = _complete(http, n=2)  # one engine request per choice
    assert len(out["choices"]) == 2
    # abort through the API while the stream is open
    with http.stream("POST", "/v1/completions", headers={"X-Request-Id": "to-abort"},
                     json={"prompt": "Hello", "max_tokens": 3000, "stream": True, "ignore_eos": True}) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data: {"))
        res = http.post("/abort_requests", json={"request_ids": ["to-abort"]}).json()
        assert res["aborted"] == 1, res
        assert any('"finish_reason":"abort"' in line.replace(" ", "") for line in lines)
    asyncio.run(_dropped_streams(d.url, BURST))
    d.wait_idle()
    # a request the frontend rejects (max_tokens < 0) while asking for a remote prefill:
    # the frontend notifies the engines with an abort_immediately ADD (ECP-REJECT-3).
    # The 400 can leave before the notice is through the monitor; the sleep below goes to every
    # engine on the same connections, after it, so its replies mean the notice was relayed
    r = http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": -1, "kv_transfer_params": {
        "do_remote_prefill": True, "remote_engine_id": "p0", "remote_block_ids": [1],
        "remote_host": "127.0.0.1", "remote_port": 1}})
    assert r.status_code == 400
    assert http.post("/sleep", params={"level": "1"}).status_code == 200
    assert http.get("/is_sleeping").json()["is_sleeping"] is True
    assert http.post("/wake_up").status_code == 200
    assert http.get("/is_sleeping").json()["is_sleeping"] is False
    d.wait_idle()
    return {"add": 3 + 2 + 1 + BURST + 1, "utility": 2 * 4}


def test_real_traffic_through_the_monitor_has_no_violations_and_replays_the_same(tmp_path):
    # the rejected request below names a producer: the frontend trusts its client (ECP-SEC-5) and
    # the engines allow that producer (ECP-SEC-4)
    d = Deployment(tmp_path, serve_args=("--kv-connector", "reference", "--trust-request-kv-params"),
                   engine_args=("--kv-connector", "reference", "--kv-producer", "127.0.0.1:1", "--step-time-ms", "2"))
    try:
        expected = _drive(d)
        code, report = d.stop_monitor()
    finally:
        d.close()
    assert report["violations_total"] == 0, report["violations"][:3]
    assert code == 0 and report["exit_code"] == 0 and report["cases"] == []
    to_engine = report["traffic"]["messages"]["to_engine"]
    to_frontend = report["traffic"]["messages"]["to_frontend"]
    assert to_engine["init"] == 2 and to_frontend["hello"] == 2 and to_frontend["ready"] == 2
    assert to_frontend["ready_response"] == 2
    assert to_engine["add"] == expected["add"]
    assert to_engine["utility"] == expected["utility"] and to_frontend["utility_output"] == expected["utility"]
    # the API abort and every dropped stream were aborted: count the ids in the recorded ABORTs
    aborted = [rid for m in read_capture(d.capture) if isinstance(m, Observed) and m.socket == "input" and m.frames[0] == b"\x01"
               for rid in decode_input(m.frames)]
    assert len(aborted) == len(set(aborted)) == 1 + BURST
    assert 2 <= to_engine["abort"] <= 1 + BURST
    # every admitted request (all but the rejection notice) got outputs; several requests share one
    # outputs message when they are stepped together, so count request ids, not messages
    answered = {o.request_id for m in read_capture(d.capture) if isinstance(m, Observed) and m.socket == "output"
                for batch in [decode_outputs(m.frames)] if not isinstance(batch, EngineDeadSentinel) for o in batch.outputs}
    assert len(answered) == expected["add"] - 1, len(answered)
    assert report["traffic"]["engines"] == [0, 1] and report["traffic"]["open_requests"] == 0
    assert "undecodable" not in to_engine and "undecodable" not in to_frontend

    code, replayed = replay(d.capture, tmp_path / "replay.json")
    assert code == 0 and replayed["violations_total"] == 0
    assert replayed["traffic"]["messages"] == report["traffic"]["messages"]


@pytest.mark.parametrize("bug, clause, drive", [
    # utility results are bare values, not [type_info, value]: the reply does not decode
    ("bare-utility-result", "ECP-FRAME-2", "utility"),
    # every terminal output is sent twice: a rule of the request lifecycle (the protocol machines)
    ("duplicate-output", "ECP-OUT-1", "completions"),
])
def test_an_engine_fault_is_reported_with_its_clause_and_replay_finds_the_same(tmp_path, bug, clause, drive):
    d = Deployment(tmp_path, engine_args=("--bug", bug))
    try:
        for _ in range(2):
            assert _complete(d.http)["choices"][0]["finish_reason"] == "length"
        if drive == "utility":
            # the frontend cannot read the replies (and fails closed: its business, not the monitor's)
            assert d.http.get("/is_sleeping").status_code >= 500
        d.wait_violations(2)  # one per engine: the frontend failed closed on the first reply it read
        code, report = d.stop_monitor()
    finally:
        d.close()
    assert code == 1 and report["exit_code"] == 1 and report["validator"] == "machines"
    found = {(v["clause"], v["direction"], v["socket"]) for v in report["violations"]}
    assert found == {(clause, "to_frontend", "output")}, report["violations"]
    assert report["violations_total"] == 2
    if drive == "utility":  # one reply from each engine
        assert sorted(v["rank"] for v in report["violations"]) == [0, 1]
    else:  # one per completion, naming the request it concerns
        assert len({v["request_id"] for v in report["violations"]}) == 2
        assert all(v["request_id"].startswith("cmpl-") for v in report["violations"])
    assert [c["id"] for c in report["cases"]] == ["MON-" + clause[4:]] and report["cases"][0]["transcript"]
    assert len(list(d.transcripts.iterdir())) == 2
    code, replayed = replay(d.capture, tmp_path / "replay.json")
    assert code == 1
    key = lambda v: (v["seq"], v["clause"], v["rank"], v["socket"], v["request_id"], v["message"])  # noqa: E731
    assert [key(v) for v in replayed["violations"]] == [key(v) for v in report["violations"]]
