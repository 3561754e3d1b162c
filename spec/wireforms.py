"""The wire forms of msgpack values (``ECP-FRAME-11``): a payload read as a tree of values that keeps
the form each one was written in, written back in any other conforming form, and two payloads
compared by what differs.

ECP-FRAME-11 says a value conforms by its msgpack type and value, not by its bytes: any integer form
that holds an int, float64 or an exact float32 (or an integer for an integral float where a float is
declared), any header width. This module is what a tool needs to act on that rule:

* :func:`parse` reads one msgpack document into :class:`Node` s (kind, value, the marker byte it was
  written with, children), refusing what no form allows (reserved ``c1``, truncation, trailing bytes).
* :func:`write` writes a tree back, in vLLM's forms (``shortest``) or in other conforming ones: every
  non-negative int as int64 (``ints="int64"``), every header at its widest (``headers="widest"``),
  every float that a float32 holds exactly as float32 (``floats="float32"``), and integral floats as
  integers at the places a caller says a float is declared (``int_for_float``).
* :func:`differences` lists where two payloads differ and how: ``int form``, ``float width``,
  ``header width``, ``int for float`` (allowed only where the type declares a float: the caller
  checks that with the typed decoder), or ``value`` (a different value or wire type: not allowed).

Nothing here decodes a message type; :mod:`ecp.spec.codec` does that.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

#: the kinds of difference :func:`differences` reports; all but ``value`` are conforming
#: (``int for float`` only where a float is declared)
ALLOWED = frozenset({"int form", "float width", "header width", "int for float"})

Path = tuple[Any, ...]


class WireFormError(ValueError):
    """The bytes are not one complete msgpack document."""


@dataclass
class Node:
    """One msgpack value: ``kind`` is ``int``, ``float``, ``nil``, ``bool``, ``str``, ``bin``, ``array``,
    ``map`` or ``ext``; ``marker`` the first byte it was written with; ``value`` the scalar (the
    ``(type, body)`` pair for ext); ``items`` the children (a map's as key, value, key, value, ...)."""

    kind: str
    value: Any
    marker: int
    items: list["Node"] = field(default_factory=list)


def parse(buf: bytes | bytearray | memoryview) -> Node:
    """The tree of one msgpack document; :class:`WireFormError` if it is not exactly one."""
    data = bytes(buf)
    node, end = _read(data, 0, 0)
    if end != len(data):
        raise WireFormError(f"{len(data) - end} trailing byte(s) after the value")
    return node


_MAX_DEPTH = 256


def _need(data: bytes, at: int, n: int) -> None:
    if at + n > len(data):
        raise WireFormError(f"truncated at byte {at}: {n} more byte(s) needed")


def _uint(data: bytes, at: int, n: int) -> int:
    _need(data, at, n)
    return int.from_bytes(data[at:at + n], "big")


def _read(data: bytes, at: int, depth: int) -> tuple[Node, int]:
    if depth > _MAX_DEPTH:
        raise WireFormError("nesting too deep")
    _need(data, at, 1)
    m = data[at]
    at += 1
    if m <= 0x7F:
        return Node("int", m, m), at
    if m >= 0xE0:
        return Node("int", m - 0x100, m), at
    if 0x80 <= m <= 0x8F:
        return _container(data, at, m, "map", m & 0x0F, depth)
    if 0x90 <= m <= 0x9F:
        return _container(data, at, m, "array", m & 0x0F, depth)
    if 0xA0 <= m <= 0xBF:
        return _bytes(data, at, m, "str", m & 0x1F)
    if m == 0xC0:
        return Node("nil", None, m), at
    if m in (0xC2, 0xC3):
        return Node("bool", m == 0xC3, m), at
    if m in (0xC4, 0xC5, 0xC6):
        n = 1 << (m - 0xC4)
        return _bytes(data, at + n, m, "bin", _uint(data, at, n))
    if m in (0xC7, 0xC8, 0xC9):
        n = 1 << (m - 0xC7)
        size = _uint(data, at, n)
        return _ext(data, at + n, m, size)
    if m == 0xCA:
        _need(data, at, 4)
        return Node("float", struct.unpack(">f", data[at:at + 4])[0], m), at + 4
    if m == 0xCB:
        _need(data, at, 8)
        return Node("float", struct.unpack(">d", data[at:at + 8])[0], m), at + 8
    if 0xCC <= m <= 0xCF:
        n = 1 << (m - 0xCC)
        return Node("int", _uint(data, at, n), m), at + n
    if 0xD0 <= m <= 0xD3:
        n = 1 << (m - 0xD0)
        _need(data, at, n)
        return Node("int", int.from_bytes(data[at:at + n], "big", signed=True), m), at + n
    if 0xD4 <= m <= 0xD8:
        return _ext(data, at, m, 1 << (m - 0xD4))
    if m in (0xD9, 0xDA, 0xDB):
        n = 1 << (m - 0xD9)
        return _bytes(data, at + n, m, "str", _uint(data, at, n))
    if m in (0xDC, 0xDD):
        n = 2 if m == 0xDC else 4
        return _container(data, at + n, m, "array", _uint(data, at, n), depth)
    if m in (0xDE, 0xDF):
        n = 2 if m == 0xDE else 4
        return _container(data, at + n, m, "map", _uint(data, at, n), depth)
    raise WireFormError(f"reserved marker {m:#04x} at byte {at - 1}")


def _bytes(data: bytes, at: int, m: int, kind: str, size: int) -> tuple[Node, int]:
    _need(data, at, size)
    raw = data[at:at + size]
    if kind == "str":
        try:
            return Node("str", raw.decode("utf-8"), m), at + size
        except UnicodeDecodeError as exc:
            raise WireFormError(f"str at byte {at} is not UTF-8: {exc}") from None
    return Node("bin", raw, m), at + size


def _ext(data: bytes, at: int, m: int, size: int) -> tuple[Node, int]:
    _need(data, at, 1 + size)
    code = int.from_bytes(data[at:at + 1], "big", signed=True)
    return Node("ext", (code, data[at + 1:at + 1 + size]), m), at + 1 + size


def _container(data: bytes, at: int, m: int, kind: str, count: int, depth: int) -> tuple[Node, int]:
    # every element takes at least one byte: a count beyond the bytes left is a lie, refused before allocating
    total = count * 2 if kind == "map" else count
    if total > len(data) - at:
        raise WireFormError(f"{kind} at byte {at} declares {count} element(s), more than the bytes left")
    items = []
    for _ in range(total):
        node, at = _read(data, at, depth + 1)
        items.append(node)
    return Node(kind, count, m, items), at


# ---------------------------------------------------------------------------------------------- write
Ints = Literal["shortest", "int64"]
Headers = Literal["shortest", "widest"]
Floats = Literal["keep", "float64", "float32"]


def write(node: Node, *, ints: Ints = "shortest", headers: Headers = "shortest", floats: Floats = "keep",
          int_for_float: Callable[[Path], bool] | None = None) -> bytes:
    """``node`` written back in the forms asked for (each one ECP-FRAME-11 allows):

    * ``ints``: ``shortest`` (vLLM's: fixint, then the smallest uint for non-negative values, the
      smallest int for negative ones) or ``int64`` (every int as ``d3``, except values of 2^63 and
      more, which only ``cf`` holds);
    * ``headers``: ``shortest`` (fixarray/fixmap/fixstr where they fit) or ``widest`` (32-bit);
    * ``floats``: ``keep`` each float's width, ``float64`` for all, or ``float32`` for every float
      a float32 holds exactly (the others stay float64);
    * ``int_for_float(path)``: true where a float is declared; an integral float there is written as
      an integer.
    """
    out = bytearray()
    _write(node, (), out, ints, headers, floats, int_for_float)
    return bytes(out)


def _write(node: Node, path: Path, out: bytearray, ints: Ints, headers: Headers, floats: Floats,
           int_for_float: Callable[[Path], bool] | None) -> None:
    k = node.kind
    if k == "int":
        _write_int(node.value, out, ints)
    elif k == "float":
        v = node.value
        if int_for_float is not None and v == v and v not in (float("inf"), float("-inf")) and v == int(v) \
                and -(1 << 63) <= int(v) < (1 << 64) and int_for_float(path):
            _write_int(int(v), out, ints)
        elif floats == "float32" and _float32_exact(v) or floats == "keep" and node.marker == 0xCA:
            out += b"\xca" + struct.pack(">f", v)
        else:
            out += b"\xcb" + struct.pack(">d", v)
    elif k == "nil":
        out.append(0xC0)
    elif k == "bool":
        out.append(0xC3 if node.value else 0xC2)
    elif k == "str":
        raw = node.value.encode("utf-8")
        _header(out, len(raw), headers, fix=(0xA0, 31), widths=((0xD9, 1), (0xDA, 2), (0xDB, 4)))
        out += raw
    elif k == "bin":
        _header(out, len(node.value), headers, fix=None, widths=((0xC4, 1), (0xC5, 2), (0xC6, 4)))
        out += node.value
    elif k == "ext":
        code, body = node.value
        fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
        if headers == "shortest" and len(body) in fixed:
            out.append(fixed[len(body)])
        else:
            _header(out, len(body), headers, fix=None, widths=((0xC7, 1), (0xC8, 2), (0xC9, 4)))
        out += code.to_bytes(1, "big", signed=True) + body
    elif k == "array":
        _header(out, node.value, headers, fix=(0x90, 15), widths=((0xDC, 2), (0xDD, 4)))
        for i, item in enumerate(node.items):
            _write(item, (*path, i), out, ints, headers, floats, int_for_float)
    elif k == "map":
        _header(out, node.value, headers, fix=(0x80, 15), widths=((0xDE, 2), (0xDF, 4)))
        for i in range(0, len(node.items), 2):
            key, value = node.items[i], node.items[i + 1]
            _write(key, path, out, ints, headers, floats, None)
            _write(value, (*path, key.value), out, ints, headers, floats, int_for_float)
    else:  # pragma: no cover - parse makes no other kind
        raise ValueError(k)


def _write_int(v: int, out: bytearray, ints: Ints) -> None:
    if ints == "int64" and -(1 << 63) <= v < (1 << 63):
        out += b"\xd3" + v.to_bytes(8, "big", signed=True)
    elif 0 <= v <= 0x7F:
        out.append(v)
    elif -32 <= v < 0:
        out.append(v + 0x100)
    elif v >= 0:
        for marker, n in ((0xCC, 1), (0xCD, 2), (0xCE, 4), (0xCF, 8)):
            if v < 1 << (8 * n):
                out += bytes([marker]) + v.to_bytes(n, "big")
                return
        raise WireFormError(f"{v} does not fit a msgpack integer")
    else:
        for marker, n in ((0xD0, 1), (0xD1, 2), (0xD2, 4), (0xD3, 8)):
            if v >= -(1 << (8 * n - 1)):
                out += bytes([marker]) + v.to_bytes(n, "big", signed=True)
                return
        raise WireFormError(f"{v} does not fit a msgpack integer")


def _header(out: bytearray, n: int, headers: Headers, fix: tuple[int, int] | None,
            widths: tuple[tuple[int, int], ...]) -> None:
    if headers == "shortest" and fix is not None and n <= fix[1]:
        out.append(fix[0] | n)
        return
    for marker, size in (widths[-1:] if headers == "widest" else widths):
        if n < 1 << (8 * size):
            out += bytes([marker]) + n.to_bytes(size, "big")
            return
    raise WireFormError(f"length {n} does not fit a msgpack header")


def _float32_exact(v: float) -> bool:
    try:
        return struct.unpack(">f", struct.pack(">f", v))[0] == v or v != v
    except OverflowError:
        return False


# ----------------------------------------------------------------------------------------- differences
@dataclass(frozen=True)
class Difference:
    """Where two payloads differ (``path``: array indexes and map keys) and how (one of
    :data:`ALLOWED`, or ``value``); ``reference`` and ``candidate`` describe the two forms."""

    path: Path
    how: str
    reference: str
    candidate: str

    @property
    def allowed(self) -> bool:
        return self.how in ALLOWED


def differences(reference: bytes | Node, candidate: bytes | Node) -> list[Difference]:
    """Every place where ``candidate`` differs from ``reference``, in document order; an empty list
    when the bytes are the same. Map entries are compared in order (both encoders wrote them in the
    same order); a different key is a ``value`` difference."""
    a = reference if isinstance(reference, Node) else parse(reference)
    b = candidate if isinstance(candidate, Node) else parse(candidate)
    out: list[Difference] = []
    _diff(a, b, (), out)
    return out


def _form(node: Node) -> str:
    return f"{node.kind} {node.marker:02x}"


def _diff(a: Node, b: Node, path: Path, out: list[Difference]) -> None:
    if a.kind != b.kind:
        if {a.kind, b.kind} == {"int", "float"} and float(a.value) == float(b.value) and b.kind == "int":
            out.append(Difference(path, "int for float", f"{a.value!r} ({_form(a)})", f"{b.value!r} ({_form(b)})"))
        else:
            out.append(Difference(path, "value", f"{a.value!r} ({_form(a)})", f"{b.value!r} ({_form(b)})"))
        return
    if a.kind in ("array", "map"):
        if a.value != b.value:
            out.append(Difference(path, "value", f"{a.kind} of {a.value}", f"{b.kind} of {b.value}"))
            return
        if a.marker != b.marker:
            out.append(Difference(path, "header width", _form(a), _form(b)))
        if a.kind == "array":
            for i, (x, y) in enumerate(zip(a.items, b.items)):
                _diff(x, y, (*path, i), out)
        else:
            for i in range(0, len(a.items), 2):
                ka, kb = a.items[i], b.items[i]
                if ka.kind != kb.kind or ka.value != kb.value:
                    out.append(Difference(path, "value", f"key {ka.value!r}", f"key {kb.value!r}"))
                    continue
                if ka.marker != kb.marker:
                    out.append(Difference((*path, ka.value), "header width", _form(ka), _form(kb)))
                _diff(a.items[i + 1], b.items[i + 1], (*path, ka.value), out)
        return
    same_value = _same_float(a.value, b.value) if a.kind == "float" else a.value == b.value
    if not same_value:
        out.append(Difference(path, "value", f"{a.value!r} ({_form(a)})", f"{b.value!r} ({_form(b)})"))
    elif a.marker != b.marker:
        how = {"int": "int form", "float": "float width"}.get(a.kind, "header width")
        out.append(Difference(path, how, _form(a), _form(b)))


def _same_float(x: float, y: float) -> bool:
    return x == y or (x != x and y != y)
