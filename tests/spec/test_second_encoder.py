"""A second encoder proves the encoding rules (ECP-FRAME-11): every golden vector re-encoded with the
`msgpack` package (not msgspec) is byte-identical or differs only as the rules allow, and ecp.spec's
decoder reads every allowed variant of every vector (signed int64 forms, the widest headers, float32
where exact, integers for integral floats where a float is declared) to the vector's own value."""

from __future__ import annotations

import collections
import math
import struct
from typing import Any

import msgpack
import msgspec
import msgspec.inspect as mi
import pytest

from ecp.spec import DecodeError, EngineCoreOutputs, EngineCoreRequest, ProtocolError, wireforms
from ecp.spec.frames import decode_frames
from ecp.spec.golden import load_documents

#: kind -> the message type of its payload, for finding where a float is declared
TYPES: dict[str, Any] = {"add": EngineCoreRequest, "outputs": EngineCoreOutputs}
INPUT_KINDS = {"add", "abort", "start_dp_wave", "utility"}


def _vectors():
    for doc_name, doc in sorted(load_documents().items()):
        for i, v in enumerate(doc["vectors"]):
            if v["kind"] != "engine_dead":
                yield pytest.param(v, id=f"{doc_name.removesuffix('.json')}-{i}")


VECTORS = list(_vectors())


def _payload_index(kind: str) -> int:
    return 1 if kind in INPUT_KINDS else 0


def _frames(v) -> list[bytes]:
    return [bytes.fromhex(f) for f in v["frames"]]


def _direction(kind: str) -> str:
    from ecp.spec.frames import KIND_DIRECTION
    return KIND_DIRECTION[kind]


def strict_equal(a: Any, b: Any) -> bool:
    """Equal values of the same Python types all the way down (1 and 1.0 differ; NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    return a == b


def declared_float(typ: Any, path: tuple) -> bool:
    """Whether the message type declares a float at ``path`` (array indexes and map keys)."""
    t: mi.Type = mi.type_info(typ)
    for step in path:
        t = _strip(t)
        if isinstance(t, mi.StructType):
            if t.array_like:
                if not isinstance(step, int) or step >= len(t.fields):
                    return False
                t = t.fields[step].type
            else:
                by_name = {f.encode_name: f.type for f in t.fields}
                if step not in by_name:
                    return False
                t = by_name[step]
        elif isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
            t = t.item_type
        elif isinstance(t, mi.TupleType):
            if not isinstance(step, int) or step >= len(t.item_types):
                return False
            t = t.item_types[step]
        elif isinstance(t, mi.DictType):
            t = t.value_type
        else:
            return False
    return isinstance(_strip(t), mi.FloatType)


def _strip(t: mi.Type) -> mi.Type:
    if isinstance(t, mi.UnionType):
        members = [m for m in t.types if not isinstance(m, mi.NoneType)]
        if len(members) == 1:
            return members[0]
    return t


def _msgpack_reencode(payload: bytes) -> bytes:
    value = msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True,
                            ext_hook=lambda code, data: msgpack.ExtType(code, data))
    return msgpack.packb(value, use_bin_type=True)


@pytest.mark.parametrize("vector", VECTORS)
def test_the_msgpack_package_reencodes_each_vector_as_the_rules_allow(vector):
    frames = _frames(vector)
    at = _payload_index(vector["kind"])
    if vector["kind"] == "ready_response" and frames[at] == b"":
        pytest.skip("an empty ready payload has no msgpack value")  # ECP-HS-12: nothing to encode
    again = _msgpack_reencode(frames[at])
    diffs = wireforms.differences(frames[at], again)
    assert all(d.allowed for d in diffs), [d for d in diffs if not d.allowed]
    assert not any(d.how == "int for float" for d in diffs)  # msgpack keeps a float a float
    moved = [*frames[:at], again, *frames[at + 1:]]
    assert strict_equal(decode_frames(moved, _direction(vector["kind"])).value,
                        decode_frames(frames, _direction(vector["kind"])).value)


def test_which_bytes_of_the_vectors_are_vllms_choice():
    """The summary the spec states: of the vectors' payload frames, those that the msgpack package writes
    otherwise differ only in map header width (SamplingParams' map16, ECP-FRAME-6) and float width (vllm-rs's
    float32 values, widened by msgpack)."""
    hows: collections.Counter[str] = collections.Counter()
    same = total = 0
    for param in VECTORS:
        v = param.values[0]
        frame = _frames(v)[_payload_index(v["kind"])]
        if not frame:
            continue
        total += 1
        diffs = wireforms.differences(frame, _msgpack_reencode(frame))
        same += not diffs
        hows.update({d.how for d in diffs})
    assert set(hows) == {"header width", "float width"}, hows
    assert 0 < same < total


VARIANTS = {
    "int64 ints": dict(ints="int64"),
    "widest headers": dict(headers="widest"),
    "float32 where exact": dict(floats="float32"),
    "all at once": dict(ints="int64", headers="widest", floats="float32"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_allowed_variant_of_every_vector_decodes_to_the_vectors_value(variant):
    checked = 0
    for param in VECTORS:
        v = param.values[0]
        frames = _frames(v)
        at = _payload_index(v["kind"])
        if not frames[at]:
            continue
        typ = TYPES.get(v["kind"])
        opts = dict(VARIANTS[variant])
        if variant == "all at once" and typ is not None:
            opts["int_for_float"] = lambda path, typ=typ: declared_float(typ, path)
        tree = wireforms.parse(frames[at])
        rewritten = wireforms.write(tree, **opts)
        diffs = wireforms.differences(frames[at], rewritten)
        assert all(d.allowed for d in diffs), (param.id, [d for d in diffs if not d.allowed])
        moved = [*frames[:at], rewritten, *frames[at + 1:]]
        try:
            got = decode_frames(moved, _direction(v["kind"])).value
        except ProtocolError as exc:  # pragma: no cover - the failure message names the vector
            raise AssertionError(f"{param.id} ({variant}): {exc}") from None
        assert strict_equal(got, decode_frames(frames, _direction(v["kind"])).value), (param.id, variant)
        checked += 1
    assert checked == sum(1 for p in VECTORS if _frames(p.values[0])[_payload_index(p.values[0]["kind"])])


def test_integers_for_integral_floats_land_where_a_float_is_declared():
    """arrival_time (an integral float in the ADD vectors) written as an int is the same request; the rule's
    restriction matters: in an untyped place (extra_args) an int is another value, and a float where an
    int is declared is refused."""
    [v] = [p.values[0] for p in VECTORS if p.values[0]["kind"] == "add"
           and p.values[0]["value"][3].get("extra_args")][:1]
    frames = _frames(v)
    tree = wireforms.parse(frames[1])
    assert declared_float(EngineCoreRequest, (5,)) and not declared_float(EngineCoreRequest, (3, "extra_args", "x"))
    tree.items[5] = wireforms.Node("float", 1700000000.0, 0xCB)  # an integral arrival_time
    as_float = wireforms.write(tree)
    as_int = wireforms.write(tree, int_for_float=lambda path: path == (5,))
    assert [d.how for d in wireforms.differences(as_float, as_int)] == ["int for float"]
    assert as_int.count(b"\xce" + (1700000000).to_bytes(4, "big")) == 1
    assert strict_equal(decode_frames([frames[0], as_int], "input").value,
                        decode_frames([frames[0], as_float], "input").value)
    # a float where an int is declared (max_tokens 1 -> 1.0): refused, as vLLM's msgspec decoder refuses it
    sp = tree.items[3]
    for i in range(0, len(sp.items), 2):
        if sp.items[i].value == "max_tokens":
            sp.items[i + 1] = wireforms.Node("float", float(sp.items[i + 1].value), 0xCB)
    with pytest.raises(DecodeError) as info:
        decode_frames([frames[0], wireforms.write(tree)], "input")
    assert "max_tokens" in str(info.value) or "float" in str(info.value)


def test_an_int_for_a_float_in_an_untyped_place_is_another_value():
    payload = msgspec.msgpack.encode({"x": 1.0})
    as_int = wireforms.write(wireforms.parse(payload), int_for_float=lambda path: True)
    assert msgspec.msgpack.decode(as_int) == {"x": 1} and not strict_equal(msgspec.msgpack.decode(as_int),
                                                                              {"x": 1.0})


def test_the_wire_form_reader_refuses_what_no_form_allows():
    for bad in (b"\xc1", b"\x92\x01", b"\x01\x02", b"\xa3ab", b"\xdd\xff\xff\xff\xff\xc0"):
        with pytest.raises(wireforms.WireFormError):
            wireforms.parse(bad)
    # a lossy float32 is a value difference, never a width one
    lossy = b"\xca" + struct.pack(">f", 0.1)
    [d] = wireforms.differences(msgspec.msgpack.encode(0.1), lossy)
    assert d.how == "value" and not d.allowed
