"""``ecp.spec.machine``: the protocol's behaviour as sans-IO state machines.

Messages are specified by the types and codec of :mod:`ecp.spec`; *who may
send what, when, and what must follow* is specified here, once, for both
roles: :class:`FrontendConnection` and :class:`EngineConnection` (events in,
frames out, no I/O), driven by the transition tables of :mod:`.table` (keyed by typed states and
qualified events, which :mod:`.qualify` computes once for both roles) that
``spec/PROTOCOL.md`` renders. Local misuse raises
:class:`~ecp.spec.errors.LocalProtocolError`; a peer that breaks a rule raises
:class:`~ecp.spec.errors.RemoteProtocolError` or, in recording mode, is
recorded as a :class:`Violation`.
"""

from .connection import CLOSED_STATES, RESERVED_CALL_IDS, EngineView, Mode, PendingCall, RequestState, Violation
from .engine import EngineConnection
from .frontend import FrontendConnection
from .admission import Admission, SchedulerControl, admission
from .qualify import SLEEP_TAGS
from .events import (
    COORDINATOR, Abort, Add, CoordinatorReady, CoordinatorSubscribe, EngineDead, EngineHello, EngineReady, Event,
    Init, Outputs, Registration, Send, StartWave, UtilityCall, input_socket, output_socket, parse_socket,
)
from .table import (
    HANDSHAKE, LIVENESS, REQUEST, SCHEDULER, TABLES, UTILITY, WAVE, HandshakeEvent, HandshakeState, LivenessEvent,
    LivenessState, QualifiedEvent, RequestEvent, RequestStatus, Row, SchedulerEvent, SchedulerState, State, Table,
    TableError, UtilityEvent, UtilityState, WaveEvent, WaveState, render_table,
)

__all__ = [name for name in dir() if not name.startswith("_")]
