"""The reference KV connector's lease bookkeeping (sans-IO)."""

from __future__ import annotations

from ecp.reference.engine.kv_connector import ReferenceKVConnector


def test_a_reused_request_id_does_not_leak_the_first_lease():
    freed: list[int] = []
    c = ReferenceKVConnector(engine_id="p", role="producer", free_blocks=freed.extend, host="127.0.0.1", port=1)
    keep, params = c.request_finished("x", {"do_remote_decode": True}, [1, 2], aborted=False)
    assert keep and params["remote_block_ids"] == [1, 2]
    # the same id finishes again (a frontend reusing ids) before the consumer's notice: the first
    # lease's blocks must go back to the pool, not stay pinned forever with no lease naming them
    keep, params = c.request_finished("x", {"do_remote_decode": True}, [3], aborted=False)
    assert keep and params["remote_block_ids"] == [3]
    assert freed == [1, 2]
    snap = c.snapshot()
    assert (snap["pinned_requests"], snap["pinned_blocks"]) == (1, 1)
    assert c.on_notice({"type": "free", "request_id": "x", "engine_id": "p"})
    assert freed == [1, 2, 3] and c.snapshot()["pinned_blocks"] == 0
