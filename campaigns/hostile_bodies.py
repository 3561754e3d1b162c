"""Request bodies and header values for the hostile-HTTP campaign, drawn from a ``random.Random``.

A body is built from its route's own request type (``msgspec.inspect`` of the struct the route
decodes): each field is present or not, and each value is of its declared type or, a quarter of
the time, hostile (another type, out of range, huge, deeply nested, odd text). Strings and
numbers are drawn from edge cases, so that a short run meets them all. The abort routes' bodies
(``{"request_ids": [...]}``, ``{"req_ids": [...], "abort_all": bool}``) are built the same way.
Same seed, same bodies.
"""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec

_INTS = [0, 1, 2, 3, -1, 16, 255, 256, 4096, 2**31, 2**53 + 1, 2**63 - 1, -2**63, 10**30]
_FLOATS = [0.0, 0.5, 1.0, 2.0, -0.0, -1.0, 1e-308, 1e308, -1e308, 3.5]
_TEXT = ["", "x", "hello world", "é", "\u0000", "\ud7ff\ue000", "🙂" * 3, "\r\n", "a" * 5000,
         "<|endoftext|>", "cmpl-x", "../../etc/passwd", "%s%n", "\\u0000", " "]
#: bounded so that a valid request stays cheap for the engine (the server runs max_model_len 256)
_MAX_TOKENS = [1, 2, 4, 8, None]


def text(rnd: random.Random) -> str:
    if rnd.random() < 0.7:
        return rnd.choice(_TEXT)
    return "".join(chr(rnd.choice([rnd.randint(32, 126), rnd.randint(0x80, 0x2FFF)])) for _ in range(rnd.randint(0, 40)))


def any_json(rnd: random.Random, depth: int = 0) -> Any:
    """A JSON value of any type; nesting grows deep now and then."""
    r = rnd.random()
    if depth < 3 and r < 0.15:
        return [any_json(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]
    if depth < 3 and r < 0.3:
        return {text(rnd)[:20]: any_json(rnd, depth + 1) for _ in range(rnd.randint(0, 4))}
    if r < 0.33:
        deep: Any = 1
        for _ in range(rnd.choice([50, 500, 5000])):
            deep = [deep]
        return deep
    return rnd.choice([None, True, False, rnd.choice(_INTS), rnd.choice(_FLOATS), text(rnd)])


def value_for(t: msgspec.inspect.Type, rnd: random.Random, name: str = "", hostile: float = 0.25) -> Any:
    """A value of type ``t`` (with probability ``hostile``: one of any type)."""
    if rnd.random() < hostile:
        return any_json(rnd)
    mi = msgspec.inspect
    if name in ("max_tokens", "max_completion_tokens") and rnd.random() < 0.9:
        return rnd.choice(_MAX_TOKENS)
    if name == "n" and rnd.random() < 0.9:
        return rnd.choice([1, 1, 2, 3])
    if name == "kv_transfer_params" and rnd.random() < 0.6:
        return {"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": rnd.randint(20000, 60000),
                "remote_engine_id": text(rnd)[:20], "remote_request_id": text(rnd)[:40]}
    if isinstance(t, mi.UnionType):
        return value_for(rnd.choice(t.types), rnd, name, hostile)
    if isinstance(t, mi.NoneType):
        return None
    if isinstance(t, mi.BoolType):
        return rnd.random() < 0.5
    if isinstance(t, mi.IntType):
        return rnd.choice(_INTS)
    if isinstance(t, mi.FloatType):
        return rnd.choice(_FLOATS)
    if isinstance(t, mi.StrType):
        return text(rnd)
    if isinstance(t, mi.ListType):
        size = rnd.choice([0, 1, 2, 3, 5, 300]) if name != "prompt" else rnd.choice([1, 1, 2, 3, 300])
        if isinstance(t.item_type, mi.AnyType) and name == "prompt":  # token ids or lists of them
            return rnd.choice([[rnd.randint(0, 300) for _ in range(size)],
                               [[rnd.randint(0, 300) for _ in range(rnd.randint(1, 8))] for _ in range(size)],
                               [text(rnd) for _ in range(size)]])
        if isinstance(t.item_type, (mi.StructType, mi.ListType, mi.DictType)):
            size = min(size, 3)  # (300 messages of 300 parts each would only cost this generator)
        return [value_for(t.item_type, rnd, hostile=hostile) for _ in range(size)]
    if isinstance(t, mi.DictType):
        return {text(rnd)[:20]: value_for(t.value_type, rnd, hostile=hostile) for _ in range(rnd.randint(0, 4))}
    if isinstance(t, mi.StructType):
        return struct_value(t, rnd, hostile)
    return any_json(rnd)


def struct_value(t: msgspec.inspect.StructType, rnd: random.Random, hostile: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in t.fields:
        if (f.required and rnd.random() < 0.97) or rnd.random() < 0.3:
            out[f.encode_name] = value_for(f.type, rnd, f.name, hostile)
    if rnd.random() < 0.1:
        out[text(rnd)[:20] or "extra"] = any_json(rnd)  # unknown fields are ignored, never an error
    return out


def _encode(obj: Any, rnd: random.Random) -> bytes:
    try:
        raw = json.dumps(obj, ensure_ascii=rnd.random() < 0.5).encode("utf-8", "surrogatepass")
    except (RecursionError, ValueError):
        return b"[" * 100_000  # nesting too deep for the encoder: send it unbalanced instead
    return raw


def generate_body(typ: type, rnd: random.Random) -> bytes:
    """A body for a generate route whose request type is ``typ``: half of them with values of
    the declared types only (most are then admitted), half with hostile values among them."""
    return _encode(struct_value(msgspec.inspect.type_info(typ), rnd, rnd.choice([0.0, 0.1])), rnd)


class _VllmAbort(msgspec.Struct):
    request_ids: list[str] | None = None


class _FastDeployAbort(msgspec.Struct):
    req_ids: list[str] | None = None
    abort_all: bool = False


def abort_body(path: str, rnd: random.Random) -> bytes:
    typ = _FastDeployAbort if path == "/v1/abort_requests" else _VllmAbort
    obj = struct_value(msgspec.inspect.type_info(typ), rnd, 0.2)
    if rnd.random() < 0.02:
        obj[rnd.choice(["request_ids", "req_ids"])] = [f"id{i}" for i in range(rnd.choice([10_001, 50_000]))]
    return _encode(obj, rnd)


def raw_body_mutation(rnd: random.Random) -> bytes:
    """A body that is no JSON object: broken, binary, another JSON type, nested past any parser."""
    return rnd.choice([
        b"", b"{", b"}", b"null", b"[]", b"42", b'"x"', b'{"prompt": }', b"\xff\xfe\x00", b"{" * 10_000,
        b"[" * 100_000, bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 200))),
        b'{"prompt": "x", "prompt": 5}', b'{"a": NaN}', b'{"prompt": "\\ud800"}',
    ])


def header_value(rnd: random.Random) -> bytes:
    """A header value: mostly printable, sometimes long, rarely with bytes HTTP forbids."""
    r = rnd.random()
    if r < 0.05:
        return bytes([rnd.choice([0, 1, 10, 13, 127])]) + b"x"  # refused by the HTTP parser
    if r < 0.15:
        return b"h" * rnd.choice([1000, 8000])
    return "".join(chr(rnd.randint(33, 126)) for _ in range(rnd.randint(0, 60))).encode("latin-1") or b"-"
