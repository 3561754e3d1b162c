"""Build the layout of the protocol as :mod:`ecp.spec` defines it (vLLM 0.33).

Everything is derived from the msgspec types with :mod:`msgspec.inspect`:
field order, names as encoded, types, defaults, required-ness and array/map
encoding. Only the list of top-level payloads (which frame carries which
struct, in which direction) is stated here; nested structs inherit the
direction of every payload that reaches them. Enums are collected from the
fields that use them; request-type bytes come from
:class:`~ecp.spec.enums.RequestType` and the UTILITY table from
:mod:`ecp.spec.utility_methods`.
"""

from __future__ import annotations

import enum
import inspect as pyinspect
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi

from .. import VLLM_VERSION
from ..control import CoordinatorPublication, StartDPWave, UtilityRequest
from ..enums import RequestType
from ..handshake import EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready
from ..outputs import EngineCoreOutputs
from ..request import EngineCoreRequest
from ..tensors import Tensor
from ..utility_methods import UTILITY_METHODS
from .model import (
    FORMAT, EnumLayout, FieldLayout, Layout, MessageLayout, RequestTypeLayout, UtilityMethodLayout,
    UtilityParamLayout, encode_layout,
)

#: (frame label, struct, direction) of every top-level payload, in protocol order.
TOP_LEVEL: tuple[tuple[str, type, str], ...] = (
    ("HELLO", Hello, "engine->frontend"),
    ("INIT", EngineHandshakeMetadata, "frontend->engine"),
    ("ready payload", EngineCoreReadyResponse, "engine->frontend"),
    ("READY", Ready, "engine->frontend"),
    ("ADD", EngineCoreRequest, "frontend->engine"),
    ("UTILITY", UtilityRequest, "frontend->engine"),
    ("START_DP_WAVE", StartDPWave, "coordinator->engine"),
    ("outputs", EngineCoreOutputs, "engine->frontend"),
    ("coordinator publication", CoordinatorPublication, "coordinator->frontend"),
)

NAME = "ecp.spec"
SOURCE = ("described by `ecp spec layout` from the msgspec types of ecp.spec (spec/*.py), "
          "which pin the vLLM 0.33.0 wire bytes")
_SPEC_DIR = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- types
def _type_str(t: mi.Type, structs: list[type], enums: dict[str, type]) -> str:
    if isinstance(t, mi.UnionType):
        return " | ".join(_type_str(m, structs, enums) for m in t.types)
    if isinstance(t, mi.NoneType):
        return "nil"
    if isinstance(t, mi.AnyType):
        return "any"
    if isinstance(t, mi.BoolType):
        return "bool"
    if isinstance(t, mi.IntType):
        return "int"
    if isinstance(t, mi.FloatType):
        return "float"
    if isinstance(t, mi.StrType):
        return "str"
    if isinstance(t, (mi.BytesType, mi.ByteArrayType, mi.MemoryViewType)):
        return "bytes"
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return f"array[{_type_str(t.item_type, structs, enums)}]"
    if isinstance(t, mi.TupleType):
        return "array[any]"
    if isinstance(t, mi.DictType):
        return f"map[{_type_str(t.key_type, structs, enums)}, {_type_str(t.value_type, structs, enums)}]"
    if isinstance(t, mi.EnumType):
        enums[t.cls.__name__] = t.cls
        return f"enum:{t.cls.__name__}"
    if isinstance(t, mi.LiteralType):
        return " | ".join(sorted({"str" if isinstance(v, str) else "int" for v in t.values}))
    if isinstance(t, (mi.DataclassType, mi.CustomType)) and t.cls is Tensor:
        return "tensor"
    if isinstance(t, mi.StructType):
        if t.cls not in structs:
            structs.append(t.cls)
        return f"struct:{t.cls.__name__}"
    raise TypeError(f"no layout type for {t!r}")


def type_string(t: mi.Type) -> str:
    """The layout type grammar's name of a msgspec type (``array[int]``, ``str | nil``,
    ``struct:SamplingParams``, ``enum:FinishReason``, ``tensor`` ...)."""
    return _type_str(t, [], {})


def _default(field: mi.Field) -> Any:
    value = field.default if field.default is not msgspec.NODEFAULT else field.default_factory()
    if isinstance(value, enum.Enum):
        return value.value
    return msgspec.to_builtins(value)


def _defined_in(cls: type) -> str | None:
    try:
        path = Path(pyinspect.getfile(cls)).resolve()
        return "spec/" + path.relative_to(_SPEC_DIR).as_posix()
    except (TypeError, ValueError):
        return None


def _message(cls: type, direction: str, frame: str | None, structs: list[type],
             enums: dict[str, type]) -> MessageLayout:
    info = mi.type_info(cls)
    fields = []
    for i, f in enumerate(info.fields):
        fl = FieldLayout(index=i, name=f.encode_name, type=_type_str(f.type, structs, enums), required=f.required)
        if not f.required:
            fl.default = _default(f)
        fields.append(fl)
    config = cls.__struct_config__
    tag = [info.tag_field, str(info.tag)] if info.tag_field else None
    return MessageLayout(
        encoding="array" if info.array_like else "map",
        direction=direction,  # type: ignore[arg-type]
        fields=fields,
        frame=frame,
        omit_defaults=bool(config.omit_defaults) and not info.array_like,
        tag=tag,
        defined_in=_defined_in(cls),
    )


def _merge_direction(a: str, b: str) -> str:
    if a == b:
        return a
    ends = {a.split("->")[1], b.split("->")[1]}
    return "both" if ends == {"engine", "frontend"} else a


# --------------------------------------------------------------------------- layout
def current_layout() -> Layout:
    """The layout of this package's :mod:`ecp.spec` types."""
    messages: dict[str, MessageLayout] = {}
    enums: dict[str, type] = {}
    for frame, cls, direction in TOP_LEVEL:
        pending: list[type] = []
        messages[cls.__name__] = _message(cls, direction, frame, pending, enums)
        while pending:  # nested structs reached from this payload, breadth first
            nested = pending.pop(0)
            name = nested.__name__
            if name in messages:
                messages[name].direction = _merge_direction(messages[name].direction, direction)  # type: ignore
                continue
            messages[name] = _message(nested, direction, None, pending, enums)
    enum_layouts = {
        name: EnumLayout(values={m.name: int(m.value) for m in cls})
        for name, cls in sorted(enums.items())
    }
    request_types = [RequestTypeLayout(byte=t.value.hex(), name=t.name, on_wire=t.on_wire) for t in RequestType]
    utility = {
        m.name: UtilityMethodLayout(
            result=m.result,
            params=None if m.params is None else [UtilityParamLayout(name=p.name, type=p.type, required=p.required)
                                                 for p in m.params],
        )
        for m in UTILITY_METHODS.values()
    }
    return Layout(
        format=FORMAT, name=NAME, vllm_version=VLLM_VERSION, source=SOURCE,
        messages=messages, enums=enum_layouts, request_types=request_types, utility_methods=utility,
    )


def current_layout_json() -> bytes:
    return encode_layout(current_layout())
