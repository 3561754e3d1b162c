"""Moving a message between two releases of one generated family of classes.

Every release's message types are generated from its layout with the same overlay
(:mod:`ecp.spec.wiretypes`), and :mod:`ecp.spec`'s typed API is the newest
release's generated module (vLLM 0.33). The reference peers, the harness and the
monitor think in those classes; a peer of another release is spoken to by
translating at the wire's edge: a message is rebuilt field by field, by the
field's name (which is the layout's on both sides), recursively through nested
messages, lists, maps and unions. Nothing here converts between two type
systems: what differs is what differs between the releases' wires.

The rules, which a receiver of a translated message can rely on:

- a field both releases have keeps its value (enums by their integer value);
- a field the target release lacks is not sent: vLLM of that release has no
  place for it (0.33's ``EngineCoreOutput.error`` towards 0.32);
- a field the source release lacks takes the target's default (towards 0.33:
  what 0.33's decoder gives a message without it); towards 0.33 a field 0.33
  requires and an older release never had (the ready payload's ``block_size``
  before 0.23) is the zero of its type, so that 0.33's view can be built;
- ``nil`` where the target's field takes no ``nil`` is the target's default
  (0.33's ``watermarking: nil`` is 0.31's ``False``);
- a tensor of integers where the target has a list of integers is that list, and
  back (``SamplingParams.prompt_logprob_token_ids``, retyped in 0.32);
- a value the target cannot hold (an enum member it does not define, a
  required field with nothing to fill it) raises
  :class:`~ecp.spec.errors.LocalProtocolError` citing ``ECP-COMPAT-1``.

Where a release keeps a message untyped that another types (an overlay decode limit, or a
release that had no such message), the message travels as its map, keyed by the layout's
field names.
"""

from __future__ import annotations

import enum
import struct
import types
import typing
from typing import Any, Callable

import msgspec

from ..errors import LocalProtocolError
from ..tensors import Tensor

#: (field attribute on the source, attribute on the target, converter of the value)
#: (attribute on the source or None, attribute on the target, converter of the value,
#: what nil or an absent value becomes)
_Plan = tuple[tuple[Any, str, Callable[[Any], Any], Any], ...]


def _is_struct_type(typ: Any) -> bool:
    return isinstance(typ, type) and issubclass(typ, msgspec.Struct)


class Translator:
    """Rebuilds messages as instances of another release's classes.

    ``canon(cls)`` gives, for a class of either release, each field's attribute and
    its name in the layouts; ``label`` names the target release in errors."""

    def __init__(self, label: str, canon: Callable[[type], list[tuple[str, str]]], *,
                 fill_required: bool = False) -> None:
        self.label = label
        self._canon = canon
        self._fill_required = fill_required
        self._plans: dict[tuple[type, type], _Plan] = {}

    # ------------------------------------------------------------------ structs
    def struct(self, value: msgspec.Struct, target: type) -> Any:
        """``value`` (a message of the other release) as an instance of ``target``."""
        key = (value.__class__, target)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(value.__class__, target)
        kwargs = {}
        for src, dst, convert, default in plan:
            v = getattr(value, src) if src is not None else default
            if v is None:
                if default is _REFUSE:
                    raise LocalProtocolError(
                        f"{target.__name__}.{dst} takes no nil in {self.label}", clause="ECP-COMPAT-1",
                        expected=f"a value for {target.__name__}.{dst}", got=None)
                if default is not _KEEP:
                    v = default
            elif v is not msgspec.UNSET:
                v = convert(v)
            kwargs[dst] = v
        try:
            return target(**kwargs)
        except (TypeError, ValueError, msgspec.ValidationError) as exc:
            raise LocalProtocolError(f"{target.__name__} cannot be built for {self.label}: {exc}",
                                     clause="ECP-COMPAT-1", got=target.__name__) from None

    def _plan(self, source: type, target: type) -> _Plan:
        src = {name: attr for attr, name in self._canon(source)}
        hints = {f.name: f for f in msgspec.structs.fields(target)}
        plan = []
        for attr, name in self._canon(target):
            info = hints[attr]
            if name in src:
                plan.append((src[name], attr, self.converter(info.type), _nil_default(info)))
            elif info.required and self._fill_required:
                plan.append((None, attr, _plain, _zero(info.type)))
            elif info.required:
                raise LocalProtocolError(
                    f"{target.__name__}.{name} is required in {self.label} and "
                    f"{source.__name__} has no such field", clause="ECP-COMPAT-1", expected=name)
        return tuple(plan)

    # ------------------------------------------------------------------ any value
    def converter(self, typ: Any) -> Callable[[Any], Any]:
        """A function turning a value of the other release into one ``typ`` holds
        (``None`` never reaches it)."""
        if typ is Any or typ is object:
            return _plain
        if _is_struct_type(typ):
            return lambda v, t=typ: self._to_struct(v, t)
        if isinstance(typ, type) and issubclass(typ, enum.Enum):
            return lambda v, t=typ: self._to_enum(v, t)
        if typ is Tensor:
            return _int_tensor
        origin = typing.get_origin(typ)
        args = typing.get_args(typ)
        if origin is list and args == (int,):
            return _int_list
        if origin in (list, tuple, set, frozenset) or (origin is not None and origin.__name__ == "Sequence"):
            item = self.converter(args[0]) if args and args[0] is not Ellipsis else _plain
            build = list if origin not in (set, frozenset, tuple) else origin
            return lambda v: build(_none_or(item, x) for x in v)
        if origin is dict:
            value = self.converter(args[1]) if len(args) == 2 else _plain
            return lambda v: {k: _none_or(value, x) for k, x in _as_map(v).items()}
        if origin is typing.Union or origin is types.UnionType:
            members = [a for a in args if a is not type(None)]
            if len(members) == 1:
                return self.converter(members[0])
            return lambda v, m=tuple(members): self._to_union(v, m)
        return _plain  # scalars, literals, Tensor, bytes

    def _to_struct(self, value: Any, target: type) -> Any:
        if isinstance(value, msgspec.Struct):
            return value if value.__class__ is target else self.struct(value, target)
        try:  # an untyped value (a list or map the other release kept as such)
            return msgspec.convert(value, target)
        except (msgspec.ValidationError, TypeError) as exc:
            raise LocalProtocolError(f"{target.__name__} of {self.label} cannot hold {value!r:.80}: {exc}",
                                     clause="ECP-COMPAT-1", got=type(value).__name__) from None

    def _to_enum(self, value: Any, target: type[enum.Enum]) -> Any:
        try:
            return target(int(value))
        except (ValueError, TypeError):
            raise LocalProtocolError(f"{target.__name__} has no member {value!r} in {self.label}",
                                     clause="ECP-COMPAT-1", expected=[int(m.value) for m in target],
                                     got=value) from None

    def _to_union(self, value: Any, members: tuple[Any, ...]) -> Any:
        if isinstance(value, msgspec.Struct):
            structs = [m for m in members if _is_struct_type(m)]
            same = [m for m in structs if m.__name__ == value.__class__.__name__]
            if same or len(structs) == 1:
                return self._to_struct(value, (same or structs)[0])
            return _plain(value)
        if isinstance(value, enum.Enum):
            enums = [m for m in members if isinstance(m, type) and issubclass(m, enum.Enum)]
            return self._to_enum(value, enums[0]) if enums else int(value)
        for m in members:  # containers: the first container member of the same shape
            origin = typing.get_origin(m) or m
            if isinstance(origin, type) and isinstance(value, origin) and not _is_struct_type(origin):
                return self.converter(m)(value)
        return value


#: plan marker: ``nil`` stays ``nil``
_KEEP = object()
#: plan marker: ``nil`` cannot be expressed in the target release
_REFUSE = object()
_INT_FORMATS = {"int64": "q", "<i8": "q", "int32": "i", "<i4": "i", "int16": "h", "<i2": "h", "int8": "b",
                "|i1": "b", "uint8": "B", "|u1": "B", "uint32": "I", "<u4": "I", "uint64": "Q", "<u8": "Q"}


def _as_map(value: Any) -> Any:
    """A message where the target keeps a plain map (0.33's ``EngineCoreOutput.spec_decode_metrics``, a
    ``RequestSpecDecodeMetrics`` of 0.29..0.32) as that map, keyed by the layout's field names."""
    if isinstance(value, msgspec.Struct):
        return {f.encode_name: getattr(value, f.name) for f in msgspec.structs.fields(value)}
    return value


def _nil_default(info: Any) -> Any:
    """What ``nil`` becomes in a field: itself where the field takes it, else its default."""
    typ = info.type
    if typ is Any or typ is type(None) or (typing.get_origin(typ) in (typing.Union, types.UnionType)
                                           and type(None) in typing.get_args(typ)):
        return _KEEP
    if info.default is not msgspec.NODEFAULT:
        return info.default
    if info.default_factory is not msgspec.NODEFAULT:
        return info.default_factory()
    return _REFUSE  # required and not nullable: the target release cannot hold the message


def _zero(typ: Any) -> Any:
    """The zero of a type: what a field 0.33 requires and an older release lacks holds."""
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        if type(None) in typing.get_args(typ):
            return None
        typ = typing.get_args(typ)[0]
    base = typing.get_origin(typ) or typ
    for kind, zero in ((bool, False), (int, 0), (float, 0.0), (str, ""), (bytes, b"")):
        if isinstance(base, type) and issubclass(base, kind):
            return zero
    if base in (list, dict, set, frozenset, tuple):
        return base()
    return None


def _int_tensor(value: Any) -> Any:
    """A list of integers as a 1-D int64 tensor; a tensor stays as it is."""
    if isinstance(value, Tensor):
        return value
    return Tensor("int64", (len(value),), struct.pack(f"<{len(value)}q", *value))


def _int_list(value: Any) -> Any:
    """A 1-D integer tensor as its list; a list stays as it is."""
    if not isinstance(value, Tensor):
        return list(value)
    code = _INT_FORMATS.get(value.dtype)
    if code is None or len(value.shape) != 1 or value.expected_nbytes() != len(value.data):
        raise LocalProtocolError(f"a {value.dtype} tensor of shape {value.shape} is not a list of integers",
                                 clause="ECP-COMPAT-1", expected="a 1-D integer tensor", got=value.dtype)
    return list(struct.unpack(f"<{value.shape[0]}{code}", value.data))


def _none_or(convert: Callable[[Any], Any], value: Any) -> Any:
    return None if value is None else convert(value)


def _plain(value: Any) -> Any:
    """A value typed ``Any`` on the target side: what that side's decoder would have
    produced from the wire (a message becomes its list or map), tensors kept."""
    if isinstance(value, msgspec.Struct):
        try:
            return msgspec.to_builtins(value, builtin_types=(bytes, bytearray, memoryview), enc_hook=_tensor_hook)
        except TypeError:
            return value
    return value


def _tensor_hook(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        raise TypeError("tensor")  # kept as the message it is (the encoder writes it)
    raise TypeError(type(obj).__name__)
