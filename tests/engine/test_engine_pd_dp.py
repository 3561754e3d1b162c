"""P/D disaggregation through the reference KV connector, DP waves, and process lifecycle."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from engine_rawfront import RawFrontend, make_request

from ecp.spec import FinishReason


def _prefill(fe, rid, prompt_len=40):
    fe.add(0, make_request(rid, list(range(20, 20 + prompt_len)), max_tokens=1,
                           extra_args={"kv_transfer_params": {"do_remote_decode": True}}))
    out = fe.wait_finished([rid])[rid]
    assert out.finish_reason == FinishReason.LENGTH
    return out.kv_transfer_params


def test_abort_immediately_frees_producer_blocks_in_milliseconds(rig):
    pfe, _ = rig.start(1, kv_connector="reference", kv_role="producer", block_size=16)
    # ECP-SEC-4: the consumer may notify producers on loopback, any port (the producer's is ephemeral)
    dfe, _ = rig.start(1, kv_connector="reference", kv_role="consumer", block_size=16,
                       kv_producers=["127.0.0.1/32"])
    params = _prefill(pfe, "pd-1")
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert len(params["remote_block_ids"]) == 3 and params["remote_port"] > 0
    assert params["remote_host"] == "127.0.0.1" and params["remote_engine_id"]
    stats = pfe.value(0, "get_kv_connector_stats")
    assert stats["pinned_blocks"] == 3 and stats["pinned_requests"] == 1
    assert pfe.value(0, "get_engine_state")["num_used_blocks"] == 3
    # the decode side rejects the request before admission: the rejection notice
    t0 = time.monotonic()
    dfe.add(0, make_request("pd-1", [0], max_tokens=1, abort_immediately=True,
                            extra_args={"kv_transfer_params": params}))
    stats = pfe.poll_value(0, "get_kv_connector_stats", lambda s: s["pinned_blocks"] == 0, timeout=5)
    elapsed_ms = (time.monotonic() - t0) * 1e3
    assert stats["pinned_blocks"] == 0 and elapsed_ms < 1000, elapsed_ms
    stats = pfe.value(0, "get_kv_connector_stats")
    assert stats["freed_by_notice"] == 3 and stats["freed_blocks_total"] == 3
    assert pfe.value(0, "get_engine_state")["num_used_blocks"] == 0
    assert dfe.value(0, "get_kv_connector_stats")["notices_sent"] == 1
    dfe.quiet(0.05)
    assert dfe.outputs_for("pd-1") == []
    # a consumer request that runs to completion notifies too
    params2 = _prefill(pfe, "pd-2")
    dfe.add(0, make_request("pd-2", list(range(20, 60)), max_tokens=3,
                            extra_args={"kv_transfer_params": params2}))
    assert dfe.wait_finished(["pd-2"])["pd-2"].finish_reason == FinishReason.LENGTH
    assert pfe.poll_value(0, "get_kv_connector_stats", lambda s: s["pinned_blocks"] == 0)["pinned_blocks"] == 0
    # stats carry the connector counters
    assert any(m.scheduler_stats and m.scheduler_stats.kv_connector_stats for m in pfe.messages[0])



@pytest.mark.parametrize("params", [{"remote_host": "127.0.0.1"}, {"remote_host": "h", "remote_port": "zz"},
                                    {"remote_host": "ipc://"}], ids=["no-port", "bad-port", "empty-ipc"])
def test_a_bad_producer_address_in_kv_transfer_params_is_refused_and_not_fatal(rig, params):
    # the consumer's notice would go to an address taken from the request: one that is no plain
    # allowed address is refused with an ERROR (ECP-SEC-4), and the engine goes on (ECP-ROB-1)
    fe, _ = rig.start(1, kv_connector="reference", kv_role="consumer", kv_producers=["127.0.0.0/8"])
    kv = {"do_remote_prefill": True, "remote_engine_id": "p", **params}
    fe.add(0, make_request("bad-pd", [0], max_tokens=1, abort_immediately=True,
                           extra_args={"kv_transfer_params": kv}))
    fe.add(0, make_request("bad-pd-2", max_tokens=2, extra_args={"kv_transfer_params": kv}))
    done = fe.wait_finished(["bad-pd", "bad-pd-2"])
    for rid in ("bad-pd", "bad-pd-2"):
        assert done[rid].finish_reason == FinishReason.ERROR and done[rid].error.code == "kv_producer_not_allowed"
    fe.add(0, make_request("after", max_tokens=2))
    assert fe.wait_finished(["after"])["after"].finish_reason == FinishReason.LENGTH
    assert fe.value(0, "get_kv_connector_stats")["notices_sent"] == 0
    assert not fe.dead()


def test_producer_lease_expires(rig):
    fe, _ = rig.start(1, kv_connector="reference", kv_role="producer", kv_lease_s=0.2)
    _prefill(fe, "lease-1")
    assert fe.poll_value(0, "get_kv_connector_stats", lambda s: s["freed_by_expiry"] == 3)["freed_by_expiry"] == 3
    assert fe.value(0, "get_engine_state")["num_used_blocks"] == 0


def test_dp_coordinator_gate_and_waves(rig):
    fe, _ = rig.start(2, coordinator=True)
    subs = [i for i, o in enumerate(fe.order) if o[0] == "SUB"]
    readies = [i for i, o in enumerate(fe.order) if o[0] == "READY"]
    assert len(subs) == 2 and max(subs) < min(readies)  # READY only after the gate
    fe.add(0, make_request("d0", max_tokens=3, current_wave=0))
    fe.wait_finished(["d0"])
    assert fe.pump(lambda: any(m.wave_complete == 0 and m.engine_index == 0 for m in fe.coord_messages))
    assert fe.value(0, "get_engine_state")["current_wave"] == 1
    # START_DP_WAVE: every engine but the excluded one adopts a newer wave
    fe.start_wave(5, exclude=0)
    # rank 1 runs wave 5 and moves on to 6 when idle; only rank 0 reports waves (ECP-DP-5)
    assert fe.poll_value(1, "get_engine_state", lambda s: s["current_wave"] == 6)["current_wave"] == 6
    assert not any(m.wave_complete is not None and m.engine_index != 0 for m in fe.coord_messages)
    assert fe.value(0, "get_engine_state")["current_wave"] == 1
    # a stale-wave ADD to an idle engine asks the coordinator to start a wave
    fe.add(1, make_request("d1", max_tokens=2, current_wave=0))
    fe.wait_finished(["d1"])
    assert fe.pump(lambda: any(m.start_wave == 6 and m.engine_index == 1 for m in fe.coord_messages))
    assert any(m.scheduler_stats is not None for m in fe.coord_messages)
    # DP control never reaches a client's output socket (ECP-OUT-6)
    assert not any(m.wave_complete is not None or m.start_wave is not None for m in fe.messages[0])
    # with a coordinator the finished set is included (DPLB needs it)
    assert any(m.finished_requests and "d0" in m.finished_requests for m in fe.messages[0])


def test_process_mode_sigterm_aborts_in_flight_and_exits_zero(rig):
    fe, handle = rig.start(1, mode="process", step_time_ms=5, stderr=subprocess.DEVNULL)
    fe.add(0, make_request("s1", max_tokens=1000))
    assert fe.pump(lambda: fe.tokens("s1"), timeout=20)
    handle.signal(signal.SIGTERM)
    out = fe.wait_finished(["s1"], timeout=15)["s1"]
    assert out.finish_reason == FinishReason.ABORT
    assert handle.wait(15) == [0]


@pytest.mark.parametrize("extra", [[], ["--in-process"]], ids=["process-per-rank", "in-process"])
def test_cli_runs_ranks_and_exits_zero_on_sigterm(tmp_path, extra):
    fe = RawFrontend(str(tmp_path), transport="tcp")
    proc = subprocess.Popen([sys.executable, "-m", "ecp.spec.cli", "engine", "--handshake-address",
                             fe.handshake_address, "--engine-count", "2", "--engine-start-index", "0",
                             "--max-model-len", "256", "--num-gpu-blocks", "64", "--log-level", "WARNING",
                             *extra], stderr=subprocess.DEVNULL)
    try:
        fe.handshake([0, 1], timeout=30)
        for rank in (0, 1):
            fe.add(rank, make_request(f"c{rank}", max_tokens=3))
        fe.wait_finished(["c0", "c1"], timeout=15)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        fe.close()


def test_cli_supervisor_takes_the_other_ranks_down_when_one_fails(tmp_path):
    fe = RawFrontend(str(tmp_path), transport="ipc")
    proc = subprocess.Popen([sys.executable, "-m", "ecp.spec.cli", "engine", "--handshake-address",
                             fe.handshake_address, "--engine-count", "2", "--max-model-len", "256",
                             "--num-gpu-blocks", "64", "--step-time-ms", "50", "--bug", "crash-on-bad-frame",
                             "--log-level", "ERROR"],
                            stderr=subprocess.DEVNULL)
    try:
        fe.handshake([0, 1], timeout=30)
        fe.add(1, make_request("survivor", max_tokens=10_000, ignore_eos=True))
        assert fe.pump(lambda: fe.tokens("survivor"), timeout=15)
        fe.send(0, [b"\x09", b"\x90"])  # fatal for rank 0 under the knob
        assert fe.pump(lambda: fe.dead(), timeout=15)
        # rank 1 is stopped gracefully (its request gets an ABORT output) and the CLI reports the failure
        assert fe.wait_finished(["survivor"], timeout=15)["survivor"].finish_reason == FinishReason.ABORT
        assert proc.wait(20) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        fe.close()


def test_aborted_ids_go_into_finished_requests_with_a_coordinator(rig):
    # vLLM's include_finished_set: client ABORTs and abort_immediately ADDs produce no output,
    # but their ids are reported in finished_requests
    fe, _ = rig.start(1, coordinator=True, step_time_ms=5)
    fe.add(0, make_request("ai", [0], max_tokens=1, abort_immediately=True))
    fe.add(0, make_request("ab", max_tokens=10_000))
    assert fe.pump(lambda: fe.tokens("ab"))
    fe.abort(0, ["ab"])
    fe.add(0, make_request("after", max_tokens=2))
    fe.wait_finished(["after"])
    reported = set().union(*(m.finished_requests or set() for m in fe.messages[0]))
    assert {"ai", "ab", "after"} <= reported
    assert fe.outputs_for("ai") == [] and all(o.finish_reason is None for o in fe.outputs_for("ab"))
