"""Handshake and streaming over real ZMQ sockets (ipc and tcp)."""

from __future__ import annotations

import pytest

from engine_rawfront import make_request

from ecp.spec import REQUIRED_READY_KEYS, EngineCoreEventType, EngineCoreOutputs, FinishReason
from ecp.reference.engine.synthetic import RESERVED_TOKEN_IDS, expected_tokens


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_handshake_one_engine(rig, transport):
    fe, _ = rig.start(1, transport=transport, max_model_len=256, block_size=16, num_gpu_blocks=64)
    hello = fe.hellos[0]
    assert (hello.local, hello.headless) == (False, True)
    assert fe.readies[0].local is False and fe.readies[0].headless is True
    assert fe.readies[0].parallel_config_hash is None  # DP size 1
    rr = fe.ready_payloads[(0, 0)]
    assert (rr.max_model_len, rr.num_gpu_blocks, rr.block_size, rr.data_parallel_rank) == (256, 64, 16, 0)
    assert rr.vllm_version == "0.33.0" and rr.dtype == "float32" and len(REQUIRED_READY_KEYS) == 17
    # the Python frontend's first two calls
    assert fe.value(0, "reset_mm_cache") is None
    assert fe.value(0, "get_supported_tasks") == ["generate"]


def test_handshake_four_engines_two_clients_tcp(rig):
    fe, _ = rig.start(4, 3, transport="tcp", num_clients=2)
    assert sorted(fe.hellos) == [3, 4, 5, 6]
    for rank in range(3, 7):
        for client in (0, 1):
            assert fe.ready_payloads[(rank, client)].data_parallel_rank == rank
            assert fe.ready_payloads[(rank, client)].data_parallel_size == 7
        assert fe.readies[rank].parallel_config_hash
    # each engine serves both clients; outputs carry its rank and go to the request's client
    for rank in range(3, 7):
        fe.add(rank, make_request(f"a{rank}", max_tokens=2, client_index=1), client=0)
    fe.wait_finished([f"a{r}" for r in range(3, 7)], client=1)
    for m in fe.messages[1]:
        for o in m.outputs:
            assert m.engine_index == int(o.request_id[1:])
    assert not any(m.outputs for m in fe.messages[0])


def test_stream_exact_tokens_events_and_stats(rig):
    fe, _ = rig.start(1, seed=5, vocab_size=1000)
    fe.add(0, make_request("r1", [30, 31, 32, 33], max_tokens=5, temperature=0.0))
    fe.wait_finished(["r1"])
    fe.pump(lambda: any(not m.outputs and m.scheduler_stats for m in fe.messages[0]), timeout=5)
    outs = fe.outputs_for("r1")
    assert [len(o.new_token_ids) for o in outs] == [1, 1, 1, 1, 1]
    assert fe.tokens("r1") == expected_tokens("r1", 5, seed=5, vocab_size=1000, greedy_prompt=[30, 31, 32, 33])
    assert all(RESERVED_TOKEN_IDS <= t < 1000 for t in fe.tokens("r1"))
    assert [o.finish_reason for o in outs] == [None] * 4 + [FinishReason.LENGTH]
    first = outs[0]
    assert [e.type for e in first.events] == [EngineCoreEventType.QUEUED, EngineCoreEventType.SCHEDULED]
    assert first.prefill_stats.num_prompt_tokens == 4 and first.prefill_stats.num_computed_tokens == 4
    assert all(o.events is None and o.prefill_stats is None for o in outs[1:])
    msgs = [m for m in fe.messages[0] if isinstance(m, EngineCoreOutputs)]
    step_msgs = [m for m in msgs if m.outputs]
    assert all(m.weight_version == "default" and m.scheduler_stats is not None for m in step_msgs)
    assert all(m.engine_index == 0 and m.finished_requests is None for m in step_msgs)
    assert step_msgs[-1].scheduler_stats.num_running_reqs == 0
    stats_only = [m for m in msgs if not m.outputs and m.utility_output is None]
    assert stats_only and stats_only[0].scheduler_stats is not None
    ts = [m.timestamp for m in msgs]
    assert ts == sorted(ts) and ts[0] > 0


def test_stop_token_eos_min_tokens_ignore_eos(rig):
    fe, _ = rig.start(1, eos_every=4)
    toks = expected_tokens("s1", 6)
    # a stop token that the request will produce as its 3rd token
    fe.add(0, make_request("s1", max_tokens=10, stop_token_ids=[toks[2]]))
    # EOS (every 4th token) stops the request; the request names its EOS id
    fe.add(0, make_request("e1", max_tokens=10, _eos_token_id=7))
    # min_tokens holds EOS back: the 4th token is EOS but min_tokens=5, the 8th stops it
    fe.add(0, make_request("m1", max_tokens=10, _eos_token_id=7, min_tokens=5))
    fe.add(0, make_request("i1", max_tokens=10, _eos_token_id=7, ignore_eos=True))
    done = fe.wait_finished(["s1", "e1", "m1", "i1"])
    assert fe.tokens("s1") == toks[:3]
    assert (done["s1"].finish_reason, done["s1"].stop_reason) == (FinishReason.STOP, toks[2])
    assert len(fe.tokens("e1")) == 4 and fe.tokens("e1")[-1] == 7
    assert (done["e1"].finish_reason, done["e1"].stop_reason) == (FinishReason.STOP, None)
    assert len(fe.tokens("m1")) == 8 and done["m1"].finish_reason == FinishReason.STOP
    assert len(fe.tokens("i1")) == 10 and done["i1"].finish_reason == FinishReason.LENGTH


def test_chunked_outputs_and_max_model_len(rig):
    fe, _ = rig.start(1, output_token_chunk_size=3, max_model_len=64, num_gpu_blocks=16)
    fe.add(0, make_request("c1", max_tokens=7))
    fe.add(0, make_request("L1", list(range(20, 80)), max_tokens=100))  # 60 prompt tokens, room for 4
    done = fe.wait_finished(["c1", "L1"])
    assert [len(o.new_token_ids) for o in fe.outputs_for("c1")] == [3, 3, 1]
    assert fe.tokens("c1") == expected_tokens("c1", 7)
    assert done["L1"].finish_reason == FinishReason.LENGTH and len(fe.tokens("L1")) == 4


def test_streams_are_keyed_like_a_model(rig):
    fe, _ = rig.start(1)
    fe.add(0, make_request("x1", max_tokens=4, seed=99))
    fe.add(0, make_request("x2", [50, 51], max_tokens=4, seed=99))
    fe.add(0, make_request("g1", [7, 8, 9], max_tokens=4, temperature=0.0))
    fe.add(0, make_request("g2", [7, 8, 9], max_tokens=4, temperature=0.0))
    fe.add(0, make_request("u1", [7, 8, 9], max_tokens=4))
    fe.wait_finished(["x1", "x2", "g1", "g2", "u1"])
    # a sampling seed keys the stream; greedy requests continue the same prompt the same way
    assert fe.tokens("x1") == fe.tokens("x2") == expected_tokens("ignored", 4, sampling_seed=99)
    assert fe.tokens("g1") == fe.tokens("g2") == expected_tokens("g", 4, greedy_prompt=[7, 8, 9])
    assert fe.tokens("u1") == expected_tokens("u1", 4) != fe.tokens("g1")


def test_disable_log_stats_sends_no_stats(rig):
    fe, _ = rig.start(1, disable_log_stats=True)
    fe.add(0, make_request("n1", max_tokens=3))
    fe.add(0, make_request("n2", max_tokens=30))
    fe.pump(lambda: fe.tokens("n2"))
    fe.abort(0, ["n2"])
    fe.wait_finished(["n1"])
    fe.value(0, "is_sleeping")  # a round trip after the abort: any stats-only message came before it
    msgs = [m for m in fe.messages[0] if isinstance(m, EngineCoreOutputs)]
    assert all(m.scheduler_stats is None for m in msgs)
    assert all(m.outputs or m.utility_output for m in msgs)  # no stats-only messages either


def test_synthetic_logprobs_layout(rig):
    import array

    fe, _ = rig.start(1, output_token_chunk_size=2)
    fe.add(0, make_request("lp", max_tokens=4, logprobs=3))
    fe.add(0, make_request("nolp", max_tokens=2))
    fe.wait_finished(["lp", "nolp"])
    for o in fe.outputs_for("lp"):
        lp = o.new_logprobs
        n = len(o.new_token_ids)
        assert lp.logprob_token_ids.shape == (n, 4) and lp.logprobs.shape == (n, 4)
        assert lp.sampled_token_ranks.shape == (n,)
        ids = array.array("i", lp.logprob_token_ids.data)
        vals = array.array("f", lp.logprobs.data)
        for row in range(n):
            assert ids[row * 4] == o.new_token_ids[row] and len(set(ids[row * 4:row * 4 + 4])) == 4
            assert list(vals[row * 4:row * 4 + 4]) == sorted(vals[row * 4:row * 4 + 4], reverse=True)
    assert all(o.new_logprobs is None for o in fe.outputs_for("nolp"))


@pytest.mark.timeout(20)
def test_synthetic_logprobs_never_exceed_the_vocabulary():
    # the executor caps K at vocab_size - 1 itself (defence in depth: the engine also refuses
    # K > vocab_size at admission); uncapped, K = 10**9 searched for alternatives ~8e9 times
    from ecp.reference.engine.executor import ScheduledSpan, StepBatch
    from ecp.reference.engine.synthetic import SyntheticExecutor
    from ecp.spec import SamplingParams

    ex = SyntheticExecutor(seed=0, vocab_size=64)
    ex.initialize(4, 16)
    span = ScheduledSpan(request_id="a", token_ids=[20, 21], start_position=0, block_table=[0], sample=True,
                         sampling_params=SamplingParams(max_tokens=2, logprobs=10**9),
                         prompt_token_ids=[20, 21], output_token_ids=[], is_first_chunk=True, seed=None)
    lp = ex.execute(StepBatch([span], [])).logprobs["a"]
    assert lp.logprob_token_ids.shape == (1, 64)
