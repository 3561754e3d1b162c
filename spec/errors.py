"""The two error families of the protocol, in the style of h11.

* :class:`LocalProtocolError` -- *this* side was asked to do something the
  protocol forbids (encode an invalid message, send in the wrong state). The
  caller has a bug; nothing was sent.
* :class:`RemoteProtocolError` -- the *peer* sent something the protocol
  forbids (undecodable frame, wrong frame count, refused ext type). The
  receiver must not crash: it drops or rejects the offending message, reports
  it, and keeps serving (``ECP-ROB-1``).

Every error names the spec clause it enforces (``clause``, an id from
:mod:`ecp.spec.clauses`) and carries structured fields next to the prose, so
that tools (the conformance harness, ``ecp decode``) can report them
precisely.
"""

from __future__ import annotations

from typing import Any, Sequence, TypeVar

#: the structured fields every protocol error carries; read-only once the error exists
_FIELDS = frozenset(("message", "clause", "frame_index", "field_path", "expected", "got", "request_id",
                     "client_index", "call_id"))


_E = TypeVar("_E", bound="ProtocolError")


class ProtocolError(Exception):
    """Base class of every error raised by :mod:`ecp.spec`.

    Attributes:
        clause: spec clause id (``ECP-…``) that the offending input violates.
        frame_index: index of the offending frame within the multipart
            message, where known (0 = first frame the codec saw).
        field_path: msgspec-style path inside the payload (``$[3].max_tokens``).
        expected: what the clause requires, short.
        got: what was found, short (never a full payload).
        request_id: the request the offending message concerns, where known
            (for an ADD that failed to decode: the id recovered from it, so
            the receiver can answer it, ``ECP-ROB-2``).
        client_index: that request's (or call's) ``client_index``, where known.
        call_id: for a UTILITY that failed to decode, the call id recovered from it, so the
            receiver may answer it with ``failure_message`` (``ECP-ROB-1``).
    """

    def __init__(
        self,
        message: str,
        *,
        clause: str,
        frame_index: int | None = None,
        field_path: str | None = None,
        expected: Any = None,
        got: Any = None,
        request_id: str | None = None,
        client_index: int | None = None,
        call_id: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.clause = clause
        self.frame_index = frame_index
        self.field_path = field_path
        self.expected = expected
        self.got = got
        self.request_id = request_id
        self.client_index = client_index
        self.call_id = call_id

    def __setattr__(self, name: str, value: Any) -> None:
        # an error may be raised, recorded and reported by several parties: what one of them read
        # must not change under the others (a receiver that knows more makes a new error: replace)
        if name in _FIELDS and name in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.{name} is read-only; use .replace({name}=...)")
        super().__setattr__(name, value)

    def replace(self: _E, **changes: Any) -> _E:
        """A copy of this error, of the same class, with ``changes`` to its structured fields (a
        receiver that learnt where the offending message was, or which clause it broke)."""
        unknown = set(changes) - _FIELDS
        if unknown:
            raise TypeError(f"not fields of a protocol error: {sorted(unknown)}")
        new = type(self).__new__(type(self))
        Exception.__init__(new, *self.args)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view, used by CLIs and conformance reports."""
        return {
            "error": type(self).__name__,
            "clause": self.clause,
            "message": self.message,
            "frame_index": self.frame_index,
            "field_path": self.field_path,
            "expected": None if self.expected is None else str(self.expected),
            "got": None if self.got is None else str(self.got),
            "request_id": self.request_id,
        }

    def __str__(self) -> str:
        where = []
        if self.frame_index is not None:
            where.append(f"frame {self.frame_index}")
        if self.field_path:
            where.append(f"at {self.field_path}")
        suffix = f" ({', '.join(where)})" if where else ""
        return f"[{self.clause}] {self.message}{suffix}"


class LocalProtocolError(ProtocolError):
    """This side misused the protocol; the message was not produced or sent."""


class InvalidMessageError(LocalProtocolError, ValueError):
    """A message type's own invariant is broken (raised by its ``__post_init__``).

    Building such a message here is local misuse, and this error says so. When the
    message arrives instead, msgspec reports it from inside the decode and the codec
    raises the peer's error (a :class:`DecodeError`, or a :class:`HandshakeError` for a
    handshake message) with the same clause, ``expected`` and ``got``. (A ``ValueError``
    so that msgspec does that.)"""


class UtilityArgumentError(LocalProtocolError, TypeError):
    """A UTILITY call's arguments do not fit its method (more than it takes, or one without a
    default left out), found by :meth:`ecp.spec.utility_methods.UtilityMethod.bind`. An engine
    answers the call with a failure message (``ECP-UTIL-3``) and keeps serving; ``message`` is
    the error text that message carries."""


class RemoteProtocolError(ProtocolError):
    """The peer violated the protocol; the offending message is rejected."""


class DecodeError(RemoteProtocolError):
    """A frame or multipart message could not be decoded into a typed message."""


class FrameCountError(DecodeError):
    """A multipart message has too few or too many frames for its kind."""


class LimitExceeded(DecodeError):
    """A frame exceeds a configured size, collection-length or depth limit.

    Raised *before* the decoder allocates for the declared size.
    """


class UnsafeExtType(DecodeError):
    """A msgpack ext type that carries code (pickle = 1, cloudpickle = 2) or is
    unknown. It is refused, never decoded (``ECP-SEC-1``)."""

    def __init__(self, message: str, *, code: int, **kw: Any) -> None:
        kw.setdefault("clause", "ECP-SEC-1")
        kw.setdefault("expected", "ext type 3 (raw tensor view)")
        kw.setdefault("got", f"ext type {code}")
        super().__init__(message, **kw)
        self.code = code


class UnknownRequestType(DecodeError):
    """The one-byte request-type frame is not ADD/ABORT/START_DP_WAVE/UTILITY."""


class HandshakeError(RemoteProtocolError):
    """A handshake message is malformed or arrived in the wrong state."""


class HandshakeTimeout(HandshakeError):
    """A handshake stage did not complete in time (``ECP-HS-8``).

    ``stage`` names what was awaited (``"INIT"``, ``"HELLO"``, ``"registration"``, ``"READY"``,
    ``"the coordinator's READY"``); ``missing_ranks`` lists the engines that had not reached it.
    """

    def __init__(self, stage: str, missing_ranks: "Sequence[int]", timeout_s: float) -> None:
        super().__init__(
            f"handshake stage {stage} timed out after {timeout_s:g} s; waiting for rank(s) "
            f"{list(missing_ranks)}", clause="ECP-HS-8", expected=stage, got="timeout")
        self.stage = stage
        self.missing_ranks = list(missing_ranks)
        self.timeout_s = timeout_s

