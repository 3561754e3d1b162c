"""``ecp summary`` (and the other spec subcommands)."""

from __future__ import annotations

import argparse

from .diff.commands import register_spec


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("summary", help="print a summary of the protocol: sockets, messages, clauses")
    p.set_defaults(func=_summary)
    register_spec(subparsers)


def _summary(args: argparse.Namespace) -> int:
    import msgspec

    from . import clauses
    from .enums import RequestType
    from .handshake import EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready
    from .outputs import EngineCoreOutput, EngineCoreOutputs, UtilityOutput
    from .request import EngineCoreRequest
    from .sampling import SamplingParams

    print("engine-core protocol, pinned to vLLM 0.33.0 (ZeroMQ + msgpack)\n")
    print("input frames (frontend ROUTER -> engine DEALER): [identity(2), type(1), payload, *aux]")
    for t in RequestType:
        print(f"  0x{t.value.hex()} {t.name:<16} {'on the wire' if t.on_wire else 'engine-internal, never sent'}")
    print("output frames (engine PUSH -> frontend PULL): [payload, *aux] or ENGINE_CORE_DEAD\n")
    for typ in (Hello, Ready, EngineHandshakeMetadata, EngineCoreReadyResponse, EngineCoreRequest,
                SamplingParams, EngineCoreOutputs, EngineCoreOutput, UtilityOutput):
        info = msgspec.inspect.type_info(typ)
        fields = info.fields
        required = sum(1 for f in fields if f.required)
        enc = "array" if info.array_like else "map"
        print(f"  {typ.__name__:<26} {enc:<5} {len(fields):>2} fields, {required:>2} required")
    print()
    by_area: dict[str, int] = {}
    for c in clauses.CLAUSES.values():
        by_area[c.area] = by_area.get(c.area, 0) + 1
    print(f"{len(clauses.CLAUSES)} numbered clauses: " + ", ".join(f"{a} {n}" for a, n in by_area.items()))
    print("full text: spec/PROTOCOL.md")
    return 0
