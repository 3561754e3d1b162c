"""``ecp.spec.peer``: the steps of each role, written once, sans-IO.

The protocol machines (:mod:`ecp.spec.machine`) say what is *allowed*; a peer
skeleton says what comes *next*: :class:`EnginePeer` takes an engine from HELLO
to serving, :class:`FrontendPeer` takes a frontend's engines from their HELLO to
READY (INIT, registrations, the coordinator gate). A skeleton hands its caller
actions (connect, send) and says what it waits for; the caller moves the bytes
and keeps its own decisions. :mod:`ecp.spec.peer.zmq_io` runs the engine
skeleton over pyzmq for every engine of this repository, and the frontend
skeleton in the one frontend handshake loop (``FrontendSockets``), to which each
frontend adds its policy or evidence as ``FrontendHooks``.
"""

from .engine import EnginePeer, Payload, PayloadSource
from .frontend import STAGES, FrontendPeer, HandshakeResult, Progress
from .steps import FORCE, TWICE, WITHHOLD, Action, Connect, Deviation, SocketKind, Stage, Step, Wait

__all__ = [name for name in dir() if not name.startswith("_")]
