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


def test_consumer_notifies_once_per_request_and_its_memory_of_notified_ids_is_bounded():
    c = ReferenceKVConnector(engine_id="d", role="consumer", free_blocks=lambda blocks: None, notified_memory=4)
    params = {"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": 9, "remote_engine_id": "p"}
    c.request_finished("a", params, [], aborted=True)
    c.request_finished("a", params, [], aborted=True)  # the same request ending twice notifies once
    assert [n.payload["request_id"] for n in c.outbox] == ["a"]
    for i in range(10):
        c.request_finished(f"r{i}", params, [], aborted=False)
    assert len(c.outbox) == 11
    assert len(c._notified) == 4  # a long-running consumer does not remember every id forever
