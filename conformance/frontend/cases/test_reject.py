"""Frontend-role rejection-notification cases (``abort_immediately``, spec/PROTOCOL.md §7)."""

from __future__ import annotations

from typing import Any

from ecp.conformance.frontend.cases._common import (
    EXPECT_S, NO_SUCH_MODEL, SHORT_MAX_TOKENS, adds_in_order, expect, notices, unique,
)
from ecp.conformance.frontend.session import FrontendManager, FrontendUnderTest
from ecp.conformance.outcomes import CaseTimeout, Unsupported, CaseFailure
from ecp.conformance.registry import case


KV_PARAMS = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "ecp-prefill-0",
             "remote_block_ids": [1, 2, 3], "remote_host": "127.0.0.1", "remote_port": 5600}


async def _rejected(fe: FrontendUnderTest, kv_params: dict[str, Any] | None, rank: int | None,
                    base_id: str) -> Any:
    # the client's id both ways: a notice carries it whichever the frontend reads (ECP-REJECT-2: vLLM 0.33
    # the body's request_id, ecp serve X-Request-Id)
    headers = {"X-Request-Id": base_id}
    if rank is not None:
        headers["X-data-parallel-rank"] = str(rank)
    extra: dict[str, Any] = {"model": NO_SUCH_MODEL, "request_id": base_id}
    if kv_params is not None:
        extra["kv_transfer_params"] = kv_params
    return await fe.driver.complete(unique("reject"), SHORT_MAX_TOKENS, headers=headers, **extra)


def _require_connector(fe: FrontendUnderTest) -> None:
    if not fe.kv_connector:
        raise Unsupported("the frontend has no KV connector configured (its command has no --kv-connector / "
                          "--kv-transfer-config, or --attach with --no-kv-connector), so it must never send "
                          "rejection notices")


async def rejection_notice_shape(m: FrontendManager) -> None:
    """FE-REJECT-1."""
    fe = await m.shared()
    _require_connector(fe)
    rank = fe.engine_count - 1
    base = unique("rej")
    reply = await _rejected(fe, KV_PARAMS, rank, base)
    expect(not reply.ok, f"a request for model {NO_SUCH_MODEL!r} was accepted (HTTP {reply.status_code}); "
                         f"the case needs it rejected before admission")
    try:
        await fe.until(lambda: notices(fe), EXPECT_S, "a rejection notice")
    except CaseTimeout:
        hint = (" (an attached frontend is assumed to have a KV connector: pass --no-kv-connector if it has none)"
                if m.cfg.attach else "")
        raise CaseFailure("a request with do_remote_prefill rejected before admission sent no ADD with "
                        "abort_immediately: the prefill node's KV blocks stay pinned" + hint, "ECP-REJECT-3") from None
    await fe.quiet()
    sent = notices(fe)
    expect(len(sent) == 1, f"{len(sent)} rejection notices for one rejected request")
    got_rank, req = sent[0]
    sp = req.sampling_params
    expect(got_rank == rank, f"the notice went to engine {got_rank}, the request was pinned to rank {rank}")
    expect(req.data_parallel_rank == rank, f"the notice carries data_parallel_rank {req.data_parallel_rank}, "
                                           f"the request was pinned to {rank}")
    expect(base in req.request_id, f"the notice's request_id {req.request_id!r} does not contain the id the "
                                   f"client gave the request ({base!r}, as X-Request-Id and as the body's "
                                   f"request_id)")
    expect(req.prompt_token_ids == [0], f"the notice's prompt is {req.prompt_token_ids}, not [0]")
    expect(sp is not None and sp.max_tokens == 1, f"the notice's max_tokens is {sp and sp.max_tokens}, not 1")
    expect(sp.kv_transfer_params == KV_PARAMS,
           f"the notice's extra_args.kv_transfer_params is {sp.kv_transfer_params}, sent {KV_PARAMS}")
    expect(not adds_in_order(fe), "the rejected request also reached an engine as a normal ADD")


async def no_notice_without_remote_prefill(m: FrontendManager) -> None:
    """FE-REJECT-2."""
    fe = await m.shared()
    _require_connector(fe)
    for params in (None, {**KV_PARAMS, "do_remote_prefill": False}):
        reply = await _rejected(fe, params, None, unique("rej"))
        expect(not reply.ok, f"a request for model {NO_SUCH_MODEL!r} was accepted (HTTP {reply.status_code})")
    admitted = await fe.driver.complete(unique("admitted"), SHORT_MAX_TOKENS, kv_transfer_params=KV_PARAMS)
    expect(admitted.ok, f"an admissible request with kv_transfer_params failed: HTTP {admitted.status_code}")
    await fe.quiet()
    sent = notices(fe)
    expect(not sent, f"{len(sent)} rejection notice(s) were sent for requests that must not cause one: "
                     f"{[req.request_id for _, req in sent]}")


async def rejected_client_gets_error(m: FrontendManager) -> None:
    """FE-REJECT-3."""
    fe = await m.shared()
    reply = await _rejected(fe, KV_PARAMS, None, unique("rej"))
    expect(400 <= reply.status_code < 600,
           f"the rejected request answered HTTP {reply.status_code}, not an error status")
    expect(isinstance(reply.body, dict) and ("error" in reply.body or "message" in reply.body
                                             or "detail" in reply.body),
           f"the rejected request's body carries no error: {reply.text[:200]}")


async def no_notice_without_connector(m: FrontendManager) -> None:
    """FE-REJECT-4."""
    async def check(fe: FrontendUnderTest) -> None:
        reply = await _rejected(fe, KV_PARAMS, None, unique("rej"))
        expect(not reply.ok, f"a request for model {NO_SUCH_MODEL!r} was accepted (HTTP {reply.status_code})")
        await fe.quiet()
        sent = notices(fe)
        expect(not sent, f"a frontend without a KV connector sent {len(sent)} rejection notice(s)")

    shared = await m.shared()
    if not shared.kv_connector:
        await check(shared)
        return
    async with m.fresh(argv=m.command_without_kv_connector()) as fe:
        await check(fe)

@case("FE-REJECT-1")
def test_rejection_notice_shape(frontends):
    frontends.run(rejection_notice_shape)


@case("FE-REJECT-2")
def test_no_notice_without_remote_prefill(frontends):
    frontends.run(no_notice_without_remote_prefill)


@case("FE-REJECT-3")
def test_rejected_client_gets_error(frontends):
    frontends.run(rejected_client_gets_error)


@case("FE-REJECT-4")
def test_no_notice_without_connector(frontends):
    frontends.run(no_notice_without_connector)
