"""``stop_monitors``: a monitor's reader may close while its socket still has peers.

libzmq sends monitor events with a blocking send from the context's I/O thread: a disconnect event
for a reader that is already closed blocks that thread, and every socket of the context stops
moving (the harness once saw every later launch of a run "connect to nothing"). Stopping the
monitor first is what the harness, the client and the monitor relay do before they close.
"""

from __future__ import annotations

import zmq

from ecp.spec.peer.zmq_io import stop_monitors


def test_a_peer_leaving_after_the_reader_closed_leaves_the_context_working(tmp_path):
    ctx, peer_ctx = zmq.Context(), zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(f"ipc://{tmp_path}/a")
    reader = router.get_monitor_socket(zmq.EVENT_DISCONNECTED, addr="inproc://stop-monitors-test")
    dealer = peer_ctx.socket(zmq.DEALER)
    dealer.connect(f"ipc://{tmp_path}/a")
    dealer.send(b"hello")
    assert router.poll(5000) and router.recv_multipart()[1] == b"hello"

    stop_monitors([router, reader])  # the reader has no monitor of its own: left as is
    reader.close(0)
    dealer.close(0)  # the peer leaves while the router still runs
    # the context's I/O thread still works: a new connection on it carries a message
    fresh = ctx.socket(zmq.ROUTER)
    fresh.bind(f"ipc://{tmp_path}/b")
    other = peer_ctx.socket(zmq.DEALER)
    other.connect(f"ipc://{tmp_path}/b")
    other.send(b"still here")
    assert fresh.poll(5000), "the context stopped moving messages"  # (it is left unterminated then)
    assert fresh.recv_multipart()[1] == b"still here"
    for sock in (router, fresh, other):
        sock.close(0)
    ctx.term()
    peer_ctx.term()
