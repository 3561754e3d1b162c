"""The frontend's view of an engine-core client (``engine_client.EngineClient``) holds for the real
client and for the in-memory stand-in the HTTP tests use: every member exists and takes the
arguments the frontend passes."""

from __future__ import annotations

import inspect
from typing import Any

from ecp.reference.client import EngineCoreClient
from ecp.reference.client.stream import RequestStream, StreamSink
from ecp.reference.frontend.engine_client import EngineClient, OutputStream
from ecp.spec import EngineCoreRequest, SamplingParams

from .fakes import FakeClient, FakeStream


def _members(protocol: type) -> dict[str, Any]:
    return {name: value for name, value in vars(protocol).items() if not name.startswith("_")}


def _call_shape_mismatches(protocol: type, obj: Any) -> list[str]:
    """The protocol's members ``obj`` lacks, and its methods that refuse the arguments the protocol
    declares (positional ones passed by position, keyword-only ones by name)."""
    problems = []
    for name, member in _members(protocol).items():
        if not hasattr(type(obj), name) and not hasattr(obj, name):
            problems.append(f"{name}: missing")
            continue
        if isinstance(member, property):
            continue
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for p in list(inspect.signature(member).parameters.values())[1:]:  # without self
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                args.append(None)
            elif p.kind is p.VAR_POSITIONAL:
                args += [None, None]
            elif p.kind is p.KEYWORD_ONLY:
                kwargs[p.name] = None
        try:
            inspect.signature(getattr(obj, name)).bind(*args, **kwargs)
        except TypeError as exc:
            problems.append(f"{name}: {exc}")
    return problems


def _request() -> EngineCoreRequest:
    return EngineCoreRequest("r", [1], None, SamplingParams(max_tokens=1), None, 0.0, None, None, None)


def test_the_real_client_and_its_stream_are_what_the_frontend_uses():
    client = EngineCoreClient()  # not bound: only its shape is read
    assert isinstance(client, EngineClient)
    assert _call_shape_mismatches(EngineClient, client) == []
    stream = RequestStream(StreamSink("r", 0), lambda sink, cause: None)
    assert isinstance(stream, OutputStream)
    assert _call_shape_mismatches(OutputStream, stream) == []


def test_the_stand_in_client_and_its_stream_are_what_the_frontend_uses():
    client = FakeClient()
    assert isinstance(client, EngineClient)
    assert _call_shape_mismatches(EngineClient, client) == []
    stream = FakeStream(client, _request())
    assert isinstance(stream, OutputStream)
    assert _call_shape_mismatches(OutputStream, stream) == []


def test_the_check_finds_a_missing_member_and_a_method_that_refuses_the_frontends_arguments():
    class Lacking(FakeClient):
        abort = None  # type: ignore[assignment]

        async def sleep(self, level: int) -> None:  # type: ignore[override]  # no mode
            pass

    problems = _call_shape_mismatches(EngineClient, Lacking())
    assert [p.split(":")[0] for p in problems] == ["abort", "sleep"]
