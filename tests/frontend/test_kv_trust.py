"""The KV transfer parameters' trust boundary (spec/PROTOCOL.md §11, ECP-SEC-4 and ECP-SEC-5).

A request's ``kv_transfer_params`` name the KV producer a consumer engine connects to. Decoy
listeners stand at every form of address a request can name (host/port, ``tcp://``, ``ipc://``,
an ``ipc://`` path that climbs out of the allowed directory, ``inproc://``): none of them is ever
connected to, whether the frontend trusts its client (the engine's allow-list refuses) or not (the
frontend refuses); the allowed producer still gets its notice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import tempfile

import msgspec
import pytest
import zmq
import zmq.asyncio

from .harness import deployment, run, served

from ecp.reference.engine.config import EngineConfig, config_to_argv
from ecp.reference.engine.kv_connector import ProducerAllowList, ReferenceKVConnector

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("entries, address, allowed", [
    (["tcp://10.0.0.5:5600"], "tcp://10.0.0.5:5600", True),
    (["10.0.0.5:5600"], "tcp://10.0.0.5:5601", False),
    (["10.0.0.0/8"], "tcp://10.200.1.2:7", True),
    (["tcp://10.0.0.0/8"], "tcp://11.0.0.1:7", False),
    (["::1/128"], "tcp://[::1]:5600", True),
    (["prefill-0:5600"], "tcp://PREFILL-0:5600", True),
    (["127.0.0.0/8"], "tcp://localhost:5600", False),  # names are never resolved
    (["127.0.0.0/8"], "tcp://127.0.0.1;127.0.0.1:5600", False),  # a ZeroMQ source prefix
    (["127.0.0.0/8"], "tcp://*:5600", False),
    (["127.0.0.0/8"], "tcp://127.0.0.1:None", False),
    (["127.0.0.0/8"], "tcp://127.0.0.1:0", False),
    (["ipc:///run/kv/"], "ipc:///run/kv/p0", True),
    (["ipc:///run/kv/"], "ipc:///run/kv/../engine/input", False),
    (["ipc:///run/kv/"], "ipc:///run/kvx", False),
    (["ipc:///run/kv/p0"], "ipc:///run/kv/p0", True),
    (["ipc:///run/kv/p0"], "ipc:///run/kv/p1", False),
    (["ipc:///run/kv/"], "ipc://run/kv/p0", False),  # relative
    (["inproc://side"], "inproc://side", True),
    (["inproc://side"], "inproc://other", False),
    ([], "tcp://127.0.0.1:5600", False),
    (["0.0.0.0/0"], "udp://127.0.0.1:5600", False),
])
def test_allow_list_forms(entries, address, allowed):
    assert ProducerAllowList(entries).allows(address) is allowed


@pytest.mark.parametrize("entry", ["ipc://relative/", "ipc:///a/../b", "10.0.0.0/33", "host", "host:port",
                                   "tcp://*:5600", "inproc://", "a;b:1"])
def test_a_malformed_allow_list_entry_is_a_configuration_error(entry):
    with pytest.raises(ValueError, match="--kv-producer"):
        ProducerAllowList([entry])
    with pytest.raises(ValueError, match="--kv-producer"):
        EngineConfig(kv_producers=[entry]).validate()


def test_allow_list_survives_the_supervisors_argv():
    cfg = EngineConfig(kv_connector="reference", kv_producers=["10.0.0.0/8", "ipc:///run/kv/"])
    argv = config_to_argv(cfg)
    assert argv[argv.index("10.0.0.0/8") - 1] == "--kv-producer"
    assert argv[argv.index("ipc:///run/kv/") - 1] == "--kv-producer"


def test_a_consumer_never_queues_a_notice_for_a_producer_it_does_not_allow():
    c = ReferenceKVConnector(engine_id="d", role="consumer", free_blocks=lambda b: None,
                             producers=ProducerAllowList(["tcp://127.0.0.1:9"]))
    bad = {"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": 10}
    assert "tcp://127.0.0.1:10" in c.producer_refusal(bad)
    c.request_finished("a", bad, [], aborted=True)  # even past admission (defence in depth)
    assert c.outbox == []
    good = {**bad, "remote_port": 9}
    assert c.producer_refusal(good) is None
    c.request_finished("b", good, [], aborted=True)
    assert [n.address for n in c.outbox] == ["tcp://127.0.0.1:9"]


class Decoys:
    """Listeners nobody may connect to: a TCP socket per tcp form, a Unix socket per ipc form."""

    def __init__(self, tmp: str) -> None:
        self.socks: list[socket.socket] = []
        self.forms: dict[str, dict] = {}
        for name in ("host-port", "tcp-url"):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            s.listen(16)
            s.setblocking(False)
            self.socks.append(s)
            port = s.getsockname()[1]
            self.forms[name] = ({"remote_host": "127.0.0.1", "remote_port": port} if name == "host-port"
                                else {"remote_host": f"tcp://127.0.0.1:{port}"})
        path = os.path.join(tmp, "decoy.sock")
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        u.bind(path)
        u.listen(16)
        u.setblocking(False)
        self.socks.append(u)
        self.forms["ipc"] = {"remote_host": f"ipc://{path}"}
        # out of the allowed directory by '..': the path it names is the decoy's
        self.forms["ipc-climb"] = {"remote_host": f"ipc://{tmp}/allowed/../decoy.sock"}
        self.forms["inproc"] = {"remote_host": "inproc://decoy"}

    def connections(self) -> int:
        n = 0
        for s in self.socks:
            while True:
                try:
                    conn, _ = s.accept()
                except BlockingIOError:
                    break
                conn.close()
                n += 1
        return n

    def close(self) -> None:
        for s in self.socks:
            s.close()


def test_no_connection_to_a_producer_that_is_not_allowed_with_or_without_trust(caplog):
    caplog.set_level(logging.WARNING, logger="ecp.engine.bad_input")

    async def body():
        with tempfile.TemporaryDirectory(prefix="ecp-kvt-") as tmp:
            os.mkdir(f"{tmp}/allowed")
            allowed = f"ipc://{tmp}/allowed/producer"
            decoys = Decoys(tmp)
            ctx = zmq.asyncio.Context()
            pull = ctx.socket(zmq.PULL)
            pull.bind(allowed)
            try:
                async with deployment(1, kv_connector="reference", kv_role="consumer",
                                      kv_producers=[f"ipc://{tmp}/allowed/"]) as d:
                    def kv(form: dict, rid: str) -> dict:
                        return {"do_remote_prefill": True, "remote_engine_id": "p", "remote_request_id": rid,
                                **form}

                    # without trust: the frontend refuses every form before an engine sees it
                    async with served(d.client, kv_connector="reference", trust_kv_params=False) as (h, _):
                        for name, form in [*decoys.forms.items(), ("allowed", {"remote_host": allowed})]:
                            r = await h.post("/v1/completions", json={"prompt": "x", "max_tokens": 2,
                                                                      "kv_transfer_params": kv(form, name)})
                            assert r.status_code == 400, (name, r.text)
                            err = r.json()["error"]
                            assert err["param"] == "kv_transfer_params" and "trust" in err["message"], err
                    assert d.client.stats.rejection_notifications == 0
                    # with trust: the engine's allow-list refuses, the frontend answers 400
                    for name, form in decoys.forms.items():
                        r = await d.http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2,
                                                                       "kv_transfer_params": kv(form, name)})
                        assert r.status_code == 400, (name, r.text)
                        err = r.json()["error"]
                        assert err["param"] == "kv_transfer_params", err
                        assert "kv_producer_not_allowed" in err["message"] and "no connection" in err["message"]
                    # with trust, an allowed producer: the KV path as before, its notice arrives
                    r = await d.http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2,
                                                                   "kv_transfer_params": kv({"remote_host": allowed},
                                                                                            "ok-1")})
                    assert r.status_code == 200, r.text
                    notice = msgspec.msgpack.decode(await asyncio.wait_for(pull.recv(), 10))
                    assert notice == {"type": "free", "request_id": "ok-1", "engine_id": "p"}
                    stats = (await d.client.call_utility("get_kv_connector_stats"))[0]
                    assert stats["notices_sent"] == 1, stats
                    assert d.client.stats.rejection_notifications == 0
            finally:
                pull.close(0)
                ctx.term()
                # the allowed notice left after every refused request: a connection to a decoy
                # would have been made by now
                assert decoys.connections() == 0
                decoys.close()
        refusals = [r.getMessage() for r in caplog.records if "[ECP-SEC-4]" in r.getMessage()]
        # each refusal logged once (the frontend sends no rejection notice for refused params)
        assert len(refusals) == len(decoys.forms), refusals
        assert all("does not allow" in m for m in refusals), refusals
    run(body, timeout=60)


def test_only_the_trusted_proxys_header_with_its_value_lets_the_params_through():
    from .fakes import FakeClient

    kv = {"do_remote_prefill": True, "remote_host": "10.0.0.5", "remote_port": 5600, "remote_engine_id": "p"}

    async def body():
        client = FakeClient()
        async with served(client, kv_connector="reference", trust_kv_params=False,
                          kv_params_trust_header="X-PD-Proxy=s3cret") as (h, _):
            answers = {}
            for name, headers in (("none", {}), ("wrong", {"X-PD-Proxy": "guess"}),
                                  ("other", {"X-Other": "s3cret"}), ("proxy", {"x-pd-proxy": "s3cret"})):
                r = await h.post("/v1/completions", headers=headers,
                                 json={"prompt": "x", "max_tokens": 2, "kv_transfer_params": kv})
                answers[name] = r.status_code
            # a rejected request from the proxy is announced; one from anyone else is not
            await h.post("/v1/completions", headers={"X-PD-Proxy": "guess"},
                         json={"prompt": "x", "model": "nope", "kv_transfer_params": kv})
            await h.post("/v1/completions", headers={"X-PD-Proxy": "s3cret"},
                         json={"prompt": "x", "model": "nope", "kv_transfer_params": kv})
        assert answers == {"none": 400, "wrong": 400, "other": 400, "proxy": 200}
        assert [r.sampling_params.kv_transfer_params for r in client.added] == [kv]
        assert [n[1] for n in client.notices] == [kv]
    run(body)


@pytest.mark.parametrize("value, ok", [("X-PD=s", True), ("X-PD", False), ("=s", False), ("X PD=s", False)])
def test_the_trust_header_option_is_checked(value, ok):
    import argparse

    from ecp.reference.frontend.launch import check_args

    args = argparse.Namespace(bug=[], data_parallel_size=1, data_parallel_size_local=None,
                              data_parallel_rpc_port=None, api_server_count=1, vllm="0.33",
                              kv_params_trust_header=value)
    assert (check_args(args) is None) is ok
