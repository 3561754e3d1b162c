"""The reference KV connector's lease bookkeeping (sans-IO)."""

from __future__ import annotations

from ecp.reference.engine.kv_connector import ProducerAllowList, ReferenceKVConnector

#: the producer these tests' consumers name, allowed (ECP-SEC-4)
PRODUCER_9 = ProducerAllowList(["tcp://127.0.0.1:9"])


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
    c = ReferenceKVConnector(engine_id="d", role="consumer", free_blocks=lambda blocks: None, notified_memory=4,
                             producers=PRODUCER_9)
    params = {"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": 9, "remote_engine_id": "p"}
    c.request_finished("a", params, [], aborted=True)
    c.request_finished("a", params, [], aborted=True)  # the same request ending twice notifies once
    assert [n.payload["request_id"] for n in c.outbox] == ["a"]
    for i in range(10):
        c.request_finished(f"r{i}", params, [], aborted=False)
    assert len(c.outbox) == 11
    assert len(c._notified) == 4  # a long-running consumer does not remember every id forever


def _consumer_core():
    from ecp.reference.engine.config import EngineConfig
    from ecp.reference.engine.core import EngineCore
    from ecp.reference.engine.synthetic import SyntheticExecutor

    cfg = EngineConfig(max_model_len=128, num_gpu_blocks=64)
    connector = ReferenceKVConnector(engine_id="d", role="consumer", free_blocks=lambda blocks: None,
                                     producers=PRODUCER_9)
    return EngineCore(cfg, SyntheticExecutor(seed=cfg.seed, vocab_size=cfg.vocab_size), connector=connector)


def _kv_add(core, rid, params, *, abort_immediately=False, max_tokens=2):
    from ecp.spec import EngineCoreRequest, SamplingParams

    core.add_request(EngineCoreRequest(
        rid, [20, 21, 22], None, SamplingParams(max_tokens=max_tokens, extra_args={"kv_transfer_params": params}),
        None, 0.0, None, None, None, abort_immediately=abort_immediately))


def test_a_request_refused_while_paused_then_announced_as_rejected_frees_its_producer_once():
    """The paused engine's own hook and the frontend's rejection notice (an abort_immediately
    ADD under the response id) name the same producer transfer: one free notice, not two."""
    from ecp.spec import UtilityRequest

    core = _consumer_core()
    params = {"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": 9,
              "remote_engine_id": "p", "remote_request_id": "pre-1"}
    core.handle_utility(UtilityRequest(0, 1, "pause_generation", ["keep", False]))
    _kv_add(core, "cmpl-x-0-1a2b3c4d", params)  # refused: engine_paused
    _kv_add(core, "cmpl-x", params, abort_immediately=True)  # the frontend's rejection notice
    for _ in range(5):
        core.step()
    notices = [(n.address, n.payload) for n in core.connector.outbox]
    assert notices == [("tcp://127.0.0.1:9", {"type": "free", "request_id": "pre-1", "engine_id": "p"})]
    # a later admitted request naming that transfer again (a producer that reused its id) is a
    # new transfer: its end notifies again
    core.handle_utility(UtilityRequest(0, 2, "resume_scheduler", []))
    _kv_add(core, "retry-0", params)
    for _ in range(20):
        if not core.step():
            break
    assert [n.payload["request_id"] for n in core.connector.outbox] == ["pre-1", "pre-1"]
