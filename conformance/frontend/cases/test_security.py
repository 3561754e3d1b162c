"""Frontend-role security cases: the trust boundary of KV transfer parameters (spec/PROTOCOL.md §11.1)."""

from __future__ import annotations

from typing import Any

from ecp.conformance.frontend.cases._common import NO_SUCH_MODEL, SHORT_MAX_TOKENS, expect, unique
from ecp.conformance.frontend.launcher import has_kv_connector
from ecp.conformance.frontend.session import FrontendManager, FrontendUnderTest
from ecp.conformance.outcomes import Unsupported
from ecp.conformance.registry import case


def _client_params(marker: str) -> dict[str, Any]:
    """What a client that chose a producer would send: an address the harness never listens on."""
    return {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "ecp-untrusted-client",
            "remote_block_ids": [1, 2, 3], "remote_host": "127.0.0.1", "remote_port": 9,
            "remote_request_id": marker}


def _carrying(fe: FrontendUnderTest, marker: str) -> list[tuple[int, Any]]:
    """(rank, request) of every ADD, notices included, that carries the client's parameters."""
    out = []
    for engine in fe.engines:
        for _, req in engine.recorder.adds():
            sp = req.sampling_params
            params = sp.kv_transfer_params if sp is not None else None
            if isinstance(params, dict) and params.get("remote_request_id") == marker:
                out.append((engine.rank, req))
    return out


async def untrusted_kv_params_not_forwarded(m: FrontendManager) -> None:
    """FE-SEC-1."""
    async def check(fe: FrontendUnderTest) -> None:
        marker = unique("sec")
        admissible = await fe.driver.complete(unique("sec"), SHORT_MAX_TOKENS, kv_transfer_params=_client_params(marker))
        rejected = await fe.driver.complete(unique("sec"), SHORT_MAX_TOKENS, model=NO_SUCH_MODEL,
                                            kv_transfer_params=_client_params(marker))
        await fe.quiet()
        carried = _carrying(fe, marker)
        notices = sum(1 for _, req in carried if req.abort_immediately)
        expect(not carried,
               f"a frontend not configured to trust its clients forwarded a client's kv_transfer_params (which "
               f"name the KV producer an engine connects to, here 127.0.0.1:9): {len(carried)} ADD(s) carried "
               f"them ({notices} of them rejection notices); the admissible request was answered HTTP "
               f"{admissible.status_code}, the rejected one HTTP {rejected.status_code}", "ECP-SEC-5")

    # read from the command (or --no-kv-connector) as the shared launch reads it: no launch to find out
    connector = m.cfg.attach_kv_connector if m.cfg.attach else has_kv_connector(m.cfg.command)
    if not connector:
        raise Unsupported("the frontend has no KV connector configured (its command has no --kv-connector / "
                          "--kv-transfer-config, or --attach with --no-kv-connector), so no transfer parameters "
                          "of a client have anywhere to go")
    argv = m.command_without_kv_trust()
    if argv == list(m.cfg.command):  # the command trusts no client (or the frontend was attached): as it is
        await check(await m.shared())
        return
    async with m.fresh(argv=argv) as fe:
        await check(fe)


@case("FE-SEC-1")
def test_untrusted_kv_params_not_forwarded(frontends):
    frontends.run(untrusted_kv_params_not_forwarded)
