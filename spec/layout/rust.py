"""``ecp spec layout --from-rust DIR``: the wire layout of a Rust crate's serde definitions.

The crate is parsed with tree-sitter's Rust grammar (the ``rust`` extra:
``tree-sitter`` and ``tree-sitter-rust``); nothing is compiled or run. What it reads:

* structs deriving ``Serialize_tuple``/``Deserialize_tuple`` (serde_tuple: a msgpack
  array, fields in declaration order) or ``Serialize``/``Deserialize`` (a map);
  ``#[serde(rename)]``, ``rename_all``, ``default``, ``skip_serializing_if``,
  ``skip``; ``Option<T>`` (nil allowed; a map key may be absent);
* a hand-written ``impl Serialize for X`` / ``impl Deserialize for X`` on a type the
  crate does not derive: listed in ``not_described`` and warned about by name;
* enums: unit-only ``#[repr(uN)]`` enums with ``Serialize_repr``/``Deserialize_repr``
  (integer values, implicit ones counted like rustc does) become layout enums; unit
  enums with serde derives travel as their (renamed) variant names, a string;
* the ``#[repr(u8)]`` enum ``EngineCoreRequestType``: the request-type bytes;
* the UTILITY methods the crate calls: the string literal passed first to a function
  whose name starts with ``call_utility``, with the number of elements of the argument
  tuple passed next.

An array struct whose fields are ``dtype, shape, data`` is the tensor form of
``ECP-FRAME-7`` (``tensor``); a ``#[serde(flatten)]`` map struct adds its keys to the
map that holds it. Rust types map onto the layout's wire types (integers of any width and sign: ``int``,
the width kept in the field's note; ``f32``/``f64``: ``float``; ``Vec<u8>`` with
``serde_bytes``, ``Bytes``, ``ByteBuf``: ``bytes``; sequences: ``array``; maps: ``map``;
``rmpv::Value``/``serde_json::Value``: ``any``). A type it cannot map is ``any`` and
named in a warning (``unmapped-type``); nothing is dropped.

Names: a Rust struct is described under the Python class it copies when its doc comment
says so (``Original Python definition (`EngineZmqAddresses`)``) or when ``--name
RUST=PYTHON`` maps it; otherwise under its own name. Enum members and request types
are written in Python's ``UPPER_SNAKE`` spelling (``StartDpWave`` -> ``START_DP_WAVE``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .vllm.warnings import ExtractionWarning
from .model import (
    FORMAT, EnumLayout, FieldLayout, Layout, MessageLayout, Provenance, RequestTypeLayout, UtilityMethodLayout,
    UtilityParamLayout,
)

EXTRACTOR_VERSION = "rust-tree-sitter/1"
ROLES = ("frontend", "engine")

#: warning code -> what the layout holds instead
CODES: dict[str, str] = {
    "unmapped-type": "a Rust type with no wire type in the layout grammar: any",
    "hand-written-serde": "a type with a hand-written impl Serialize/Deserialize: not read; fields of that "
                          "type are any and the type is listed in not_described",
    "serde-attribute": "a serde attribute the layout does not model (flatten, with, untagged ...): recorded as "
                       "the field's type says",
    "enum-data": "an enum with data-carrying variants: any",
    "utility-dynamic": "a call_utility* call whose method name is not a string literal: not listed",
    "parse-error": "a file tree-sitter could not parse cleanly: what parsed is read",
}

_INTS = {"u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize"}
_NONZERO = {"NonZero" + t.capitalize() for t in _INTS}  # NonZeroU32 ...
_SEQ = {"Vec", "VecDeque", "HashSet", "BTreeSet", "IndexSet", "SmallVec", "LinkedList"}
_MAPS = {"HashMap", "BTreeMap", "IndexMap"}
_WRAPPERS = {"Box", "Arc", "Rc", "Cow"}
_STR = {"String", "str", "PathBuf", "Uuid"}
_BYTES = {"Bytes", "ByteBuf", "BytesMut"}
_ANY = {"Value", "OpaqueValue"}  # rmpv::Value, serde_json::Value and the like


class RustSourceError(ValueError):
    """The path is not a directory of Rust sources, or the Rust grammar is not installed."""


#: a construct the reader could not map (code: a key of :data:`CODES`), with the Rust file and line
RustWarning = ExtractionWarning


@dataclass
class RustExtraction:
    layout: Layout
    warnings: list[RustWarning]
    files: list[str]


@dataclass
class _Attrs:
    derives: set[str] = field(default_factory=set)
    serde: list[tuple[str, str | None]] = field(default_factory=list)  # (key, value) in order
    repr: str | None = None
    cfg_test: bool = False
    doc: list[str] = field(default_factory=list)

    def serde_value(self, key: str) -> str | None:
        return next((v for k, v in self.serde if k == key), None)

    def serde_has(self, key: str) -> bool:
        return any(k == key for k, _ in self.serde)


@dataclass
class _Item:
    kind: str  # struct | enum | alias
    name: str
    node: Any
    attrs: _Attrs
    file: str


def _parser():
    try:
        import tree_sitter
        import tree_sitter_rust
    except ImportError as exc:
        raise RustSourceError("reading Rust needs the Rust grammar: pip install "
                              "'engine-core-protocol[rust]' (tree-sitter, tree-sitter-rust)") from exc
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_rust.language()))


def _text(node) -> str:
    return node.text.decode("utf-8", "replace") if node is not None else ""


def upper_snake(name: str) -> str:
    """``StartDpWave`` -> ``START_DP_WAVE`` (Python's spelling of enum members)."""
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower())):
            out.append("_")
        out.append(ch.upper())
    return "".join(out)


def _rename_all(name: str, rule: str | None) -> str:
    if rule is None:
        return name
    words = upper_snake(name).lower().split("_")
    return {
        "snake_case": "_".join(words), "SCREAMING_SNAKE_CASE": "_".join(words).upper(),
        "kebab-case": "-".join(words), "SCREAMING-KEBAB-CASE": "-".join(words).upper(),
        "lowercase": name.lower(), "UPPERCASE": name.upper(),
        "camelCase": name[:1].lower() + name[1:], "PascalCase": name[:1].upper() + name[1:],
    }.get(rule, name)


def _string_value(node) -> str:
    content = [c for c in node.children if c.type == "string_content"]
    return _text(content[0]) if content else ""


def _token_pairs(tree) -> list[tuple[str, str | None]]:
    """``(default, rename = "x", skip_serializing_if = "f")`` -> ``[("default", None), ...]``."""
    pairs: list[tuple[str, str | None]] = []
    pending_key: str | None = None
    expect_value = False
    for child in tree.children:
        if child.type in ("(", ")", "[", "]"):
            continue
        if child.type == ",":
            if pending_key is not None:
                pairs.append((pending_key, None))
            pending_key, expect_value = None, False
        elif child.type == "=":
            expect_value = True
        elif expect_value and pending_key is not None:
            value = _string_value(child) if child.type == "string_literal" else _text(child)
            pairs.append((pending_key, value))
            pending_key, expect_value = None, False
        elif child.type == "token_tree":  # serde(default = "f", with(...)) and the like
            if pending_key is not None:
                pairs.append((pending_key, _text(child)))
                pending_key = None
        else:
            pending_key = _text(child)
    if pending_key is not None:
        pairs.append((pending_key, None))
    return pairs


def _read_attribute(node, attrs: _Attrs) -> None:
    attr = next((c for c in node.children if c.type == "attribute"), None)
    if attr is None:
        return
    path = _text(attr.child(0))
    args = attr.child_by_field_name("arguments")
    if path == "derive" and args is not None:
        attrs.derives |= {_text(c).rsplit("::", 1)[-1] for c in args.children
                          if c.type in ("identifier", "scoped_identifier")}
    elif path == "serde" and args is not None:
        attrs.serde += _token_pairs(args)
    elif path == "repr" and args is not None:
        reprs = [_text(c) for c in args.children if c.type in ("identifier", "primitive_type")]
        attrs.repr = next((r for r in reprs if r in _INTS), attrs.repr)
    elif path == "cfg" and args is not None and "test" in _text(args):
        attrs.cfg_test = True


def _members(container) -> Iterator[tuple[Any, _Attrs]]:
    """Named children of a list/body with the attributes and doc comments written before each."""
    attrs = _Attrs()
    for child in container.named_children:
        if child.type == "attribute_item":
            _read_attribute(child, attrs)
        elif child.type == "line_comment":
            doc = child.child_by_field_name("doc")
            if doc is not None:
                attrs.doc.append(_text(doc).strip())
        elif child.type == "block_comment":
            continue
        else:
            yield child, attrs
            attrs = _Attrs()


def _test_modules(rel: str, root) -> list[str]:
    """Paths (without ``.rs``) of the modules a file declares as ``#[cfg(test)] mod name;``."""
    stem = rel[:-3]
    base = stem.rsplit("/", 1)[0] if stem.rsplit("/", 1)[-1] in ("lib", "main", "mod") else stem
    if "/" not in stem and stem in ("lib", "main", "mod"):
        base = ""
    out = []
    for node, attrs in _members(root):
        if node.type == "mod_item" and attrs.cfg_test and node.child_by_field_name("body") is None:
            name = _text(node.child_by_field_name("name"))
            out.append(f"{base}/{name}" if base else name)
    return out


class _Crate:
    def __init__(self, root: Path, names: dict[str, str]) -> None:
        self.root = root
        self.names = dict(names)
        self.items: dict[str, _Item] = {}
        self.hand_written: dict[str, tuple[str, int, str]] = {}  # type -> (file, line, trait)
        self.utility_calls: dict[str, tuple[str, int, int | None]] = {}
        self.consts: dict[str, str] = {}  # const NAME: &str = "literal"
        self._pending_calls: list[tuple[Any, str]] = []
        self.warnings: list[RustWarning] = []
        self.files: list[str] = []

    def warn(self, code: str, file: str, node, message: str) -> None:
        w = RustWarning(code, file, node.start_point[0] + 1 if node is not None else 0, message)
        if w not in self.warnings:
            self.warnings.append(w)

    # ------------------------------------------------------------------ reading
    def read(self) -> None:
        parser = _parser()
        trees = {}
        for path in sorted(self.root.rglob("*.rs")):
            parts = path.relative_to(self.root).parts
            # build output, integration tests, benchmarks and examples are not the crate's wire code
            if any(p in ("target", "tests", "benches", "examples") for p in parts[:-1]):
                continue
            trees[path.relative_to(self.root).as_posix()] = parser.parse(path.read_bytes())
        test_dirs = [d for rel, tree in trees.items() for d in _test_modules(rel, tree.root_node)]
        for rel, tree in trees.items():
            if any(rel == d + ".rs" or rel.startswith(d + "/") for d in test_dirs):
                continue  # the file of a `#[cfg(test)] mod name;`
            self.files.append(rel)
            if tree.root_node.has_error:
                self.warn("parse-error", rel, tree.root_node, "the file does not parse cleanly; what parsed is read")
            self._scan(tree.root_node, rel)
        for node, file in self._pending_calls:
            self._calls(node, file)

    def _scan(self, container, file: str) -> None:
        for node, attrs in _members(container):
            if attrs.cfg_test:
                continue  # test modules and test-only items are not the wire
            if node.type in ("struct_item", "enum_item", "type_item"):
                name = _text(node.child_by_field_name("name"))
                kind = {"struct_item": "struct", "enum_item": "enum", "type_item": "alias"}[node.type]
                self.items.setdefault(name, _Item(kind, name, node, attrs, file))
                if kind != "alias":
                    self._python_name(name, attrs)
            elif node.type == "impl_item":
                self._impl(node, file)
            elif node.type == "const_item":
                value = node.child_by_field_name("value")
                if value is not None and value.type == "string_literal":
                    self.consts[_text(node.child_by_field_name("name"))] = _string_value(value)
            elif node.type == "mod_item":
                body = node.child_by_field_name("body")
                if body is not None:
                    self._scan(body, file)
            if node.type in ("function_item", "impl_item", "mod_item"):
                self._pending_calls.append((node, file))  # read once every file's consts are known

    def _python_name(self, name: str, attrs: _Attrs) -> None:
        """The Python class a struct copies, from a doc line naming it: "Python ... (`Name`)"."""
        if name in self.names:
            return
        for line in attrs.doc:
            if "Python" in line and "`" in line:
                quoted = line.split("`")[1::2]
                if quoted and quoted[0].isidentifier():
                    self.names[name] = quoted[0]
                    return

    def _impl(self, node, file: str) -> None:
        trait = node.child_by_field_name("trait")
        if trait is None:
            return
        trait_name = _text(trait.child_by_field_name("type") if trait.type == "generic_type" else trait)
        trait_name = trait_name.rsplit("::", 1)[-1]
        if trait_name in ("Serialize", "Deserialize"):
            target = _text(node.child_by_field_name("type")).split("<")[0]
            self.hand_written.setdefault(target, (file, node.start_point[0] + 1, trait_name))

    def _calls(self, node, file: str) -> None:
        stack = [node]
        while stack:
            n = stack.pop()
            if n.type == "mod_item":
                attrs_test = False
                prev = n.prev_named_sibling
                while prev is not None and prev.type == "attribute_item":
                    a = _Attrs()
                    _read_attribute(prev, a)
                    attrs_test |= a.cfg_test
                    prev = prev.prev_named_sibling
                if attrs_test and n is not node:
                    continue
            if n.type == "call_expression":
                self._utility_call(n, file)
            stack.extend(reversed(n.named_children))

    def _utility_call(self, call, file: str) -> None:
        fn = call.child_by_field_name("function")
        if fn is not None and fn.type == "generic_function":
            fn = fn.child_by_field_name("function")
        if fn is None:
            return
        last = fn.child_by_field_name("field") or fn.child_by_field_name("name") or fn
        if not _text(last).startswith("call_utility"):
            return
        args = [c for c in call.child_by_field_name("arguments").named_children if c.type != "line_comment"]
        if not args:
            return
        first = _text(args[0]).rsplit("::", 1)[-1]
        if args[0].type == "string_literal":
            method = _string_value(args[0])
        elif args[0].type in ("identifier", "scoped_identifier") and first in self.consts:
            method = self.consts[first]
        else:
            if args[0].type != "identifier":  # a forwarding helper passes its own parameter
                self.warn("utility-dynamic", file, call, f"{_text(fn)}({_text(args[0])}, ...): method name is not "
                                                         f"a string literal")
            return
        count: int | None = None
        if len(args) > 1:
            a = args[1]
            if a.type == "unit_expression":
                count = 0
            elif a.type == "tuple_expression":
                count = len([c for c in a.named_children if c.type not in ("line_comment", "block_comment")])
        self.utility_calls.setdefault(method, (file, call.start_point[0] + 1, count))


class _Builder:
    def __init__(self, crate: _Crate) -> None:
        self.crate = crate
        self.messages: dict[str, MessageLayout] = {}
        self.enums: dict[str, EnumLayout] = {}
        self.not_described: list[str] = []
        self.locations: dict[str, str] = {}
        self._busy: set[str] = set()
        self._generics: set[str] = set()

    def name_of(self, rust: str) -> str:
        return self.crate.names.get(rust, rust)

    # ------------------------------------------------------------------ types
    def wire(self, node, file: str, where: str) -> tuple[str, str]:
        """(wire type, Rust spelling) of a type node."""
        rust = " ".join(_text(node).split())
        return self._wire(node, file, where), rust

    def _args(self, node) -> list:
        ta = node.child_by_field_name("type_arguments")
        return [c for c in ta.named_children if c.type not in ("lifetime",)] if ta is not None else []

    def _wire(self, node, file: str, where: str) -> str:
        t = node.type
        if t == "primitive_type":
            text = _text(node)
            if text in _INTS:
                return "int"
            if text in ("f32", "f64"):
                return "float"
            if text == "bool":
                return "bool"
            if text in ("str", "char"):
                return "str"
        elif t == "unit_type":
            return "nil"
        elif t == "reference_type":
            return self._wire(node.child_by_field_name("type"), file, where)
        elif t == "array_type":
            elem = node.child_by_field_name("element")
            if _text(elem) == "u8":
                return "array[int]"
            return f"array[{self._wire(elem, file, where)}]"
        elif t == "tuple_type":
            members = sorted({self._wire(c, file, where) for c in node.named_children})
            return f"array[{' | '.join(members)}]" if members else "nil"
        elif t in ("type_identifier", "scoped_type_identifier", "generic_type"):
            base = node.child_by_field_name("type") if t == "generic_type" else node
            name = _text(base).rsplit("::", 1)[-1]
            args = self._args(node) if t == "generic_type" else []
            if name == "Option" and len(args) == 1:
                inner = self._wire(args[0], file, where)
                return inner if inner in ("any", "nil") or "nil" in inner.split(" | ") else f"{inner} | nil"
            if name in _WRAPPERS and args:
                return self._wire(args[0], file, where)
            if name in _SEQ and args:
                return f"array[{self._wire(args[0], file, where)}]"
            if name in _MAPS and len(args) >= 2:
                return f"map[{self._wire(args[0], file, where)}, {self._wire(args[1], file, where)}]"
            if name in _NONZERO:
                return "int"
            if name in self._generics:
                return "any"  # a type parameter: whatever the user of the struct puts there
            if name in _STR:
                return "str"
            if name in _BYTES:
                return "bytes"
            if name in _ANY:
                return "any"
            if name in self.crate.items:
                return self._named(self.crate.items[name], file, where)
            if name in self.crate.hand_written:
                return self._hand_written(name)
        self.crate.warn("unmapped-type", file, node, f"{where}: Rust type {_text(node)} has no wire type; any")
        return "any"

    def _hand_written(self, rust: str) -> str:
        """``any``: what a hand-written impl writes is not read; the type is named in
        ``not_described`` and in a warning."""
        file, line, trait = self.crate.hand_written[rust]
        name = self.name_of(rust)
        if name not in self.not_described:
            self.not_described.append(name)
            self.locations[name] = f"{file}:{line}"
            self.crate.warnings.append(RustWarning(
                "hand-written-serde", file, line, f"{rust}: impl {trait} written by hand; not read: any"))
        return "any"

    def _named(self, item: _Item, file: str, where: str) -> str:
        if item.kind == "alias":
            return self._wire(item.node.child_by_field_name("type"), item.file, where)
        if item.name in self.crate.hand_written and not (item.attrs.derives & {"Serialize", "Deserialize",
                                                                                 "Serialize_tuple",
                                                                                 "Deserialize_tuple"}):
            return self._hand_written(item.name)
        if item.kind == "enum":
            return self.enum(item)
        body = item.node.child_by_field_name("body")
        if body is not None and body.type == "ordered_field_declaration_list":
            types = [c for c in body.named_children if c.type not in ("attribute_item", "visibility_modifier",
                                                                      "line_comment")]
            if len(types) == 1:  # a newtype travels as what it wraps
                return self._wire(types[0], item.file, f"{item.name}.0")
        if not item.attrs.derives & {"Serialize", "Deserialize", "Serialize_tuple", "Deserialize_tuple"}:
            if item.attrs.derives & {"SerializeDisplay", "DeserializeFromStr"}:
                return "str"
            self.crate.warn("unmapped-type", file, item.node,
                            f"{where}: {item.name} derives no serde trait and implements none; any")
            return "any"
        self.message(item)
        msg = self.messages.get(self.name_of(item.name))
        if msg is not None and msg.encoding == "array" and [f.name for f in msg.fields] == _TENSOR_FIELDS:
            return "tensor"  # the [dtype, shape, data] form of ECP-FRAME-7
        return f"struct:{self.name_of(item.name)}"

    def _flattened(self, type_node) -> list[FieldLayout] | None:
        """The fields of the map struct a ``#[serde(flatten)]`` field holds, or ``None``."""
        name = _text(type_node).split("<")[0].rsplit("::", 1)[-1]
        item = self.crate.items.get(name)
        if item is None or item.kind != "struct" or not item.attrs.derives & {"Serialize", "Deserialize"}:
            return None
        self.message(item)
        inner = self.messages.get(self.name_of(name))
        return list(inner.fields) if inner is not None and inner.encoding == "map" else None

    # ------------------------------------------------------------------ enums
    def enum(self, item: _Item) -> str:
        variants = list(_members(item.node.child_by_field_name("body")))
        unit = all(v.child_by_field_name("body") is None for v, _ in variants)
        derives = item.attrs.derives
        if derives & {"SerializeDisplay", "DeserializeFromStr"}:
            return "str"
        if unit and derives & {"Serialize_repr", "Deserialize_repr"}:
            name = self.name_of(item.name)
            if name not in self.enums:
                self.enums[name] = EnumLayout(values=self.discriminants(item),
                                              note=f"Rust enum {item.name}, #[repr({item.attrs.repr or 'isize'})]")
            return f"enum:{name}"
        if unit and derives & {"Serialize", "Deserialize"}:
            return "str"  # serde writes a unit variant as its name
        self.crate.warn("enum-data", item.file, item.node, f"{item.name}: an enum with data or without serde "
                                                           f"derives; any")
        return "any"

    def discriminants(self, item: _Item) -> dict[str, int]:
        """Variant -> value as rustc assigns them: explicit, else the previous plus one (0 first)."""
        name = self.name_of(item.name)
        self.locations[f"enum {name}"] = f"{item.file}:{item.node.start_point[0] + 1}"
        values: dict[str, int] = {}
        nxt = 0
        for variant, _ in _members(item.node.child_by_field_name("body")):
            if variant.type != "enum_variant":
                continue
            value_node = variant.child_by_field_name("value")
            if value_node is not None:
                literal = _text(value_node).replace("_", "")
                for suffix in sorted(_INTS, key=len, reverse=True):
                    if literal.endswith(suffix) and not literal.startswith("0x"):
                        literal = literal[:-len(suffix)]
                        break
                try:
                    nxt = int(literal, 0)
                except ValueError:
                    self.crate.warn("unmapped-type", item.file, variant, f"{item.name}: discriminant "
                                                                          f"{_text(value_node)} is not a literal")
                    continue
            member = upper_snake(_text(variant.child_by_field_name("name")))
            values[member] = nxt
            self.locations[f"enum {name}.{member}"] = f"{item.file}:{variant.start_point[0] + 1}"
            nxt += 1
        return values

    # ------------------------------------------------------------------ structs
    def message(self, item: _Item) -> None:
        name = self.name_of(item.name)
        if name in self.messages or name in self._busy:
            return
        self._busy.add(name)
        derives = item.attrs.derives
        array = bool(derives & {"Serialize_tuple", "Deserialize_tuple"})
        body = item.node.child_by_field_name("body")
        struct_default = item.attrs.serde_has("default")
        rename_all = item.attrs.serde_value("rename_all")
        for key, _ in item.attrs.serde:
            if key in ("transparent", "untagged", "tag", "content", "flatten", "from", "into", "try_from"):
                self.crate.warn("serde-attribute", item.file, item.node, f"{item.name}: #[serde({key})] is not "
                                                                         f"modelled")
        fields: list[FieldLayout] = []
        self.locations[name] = f"{item.file}:{item.node.start_point[0] + 1}"
        params = item.node.child_by_field_name("type_parameters")
        outer_generics = self._generics
        self._generics = outer_generics | {_text(c.child_by_field_name("name") or c) for c in (
            params.named_children if params is not None else []) if c.type in ("type_parameter", "type_identifier")}
        members = list(_members(body)) if body is not None and body.type == "field_declaration_list" else []
        for node, attrs in members:
            if node.type != "field_declaration":
                continue
            rust_name = _text(node.child_by_field_name("name")).removeprefix("r#")
            if attrs.serde_has("flatten") and not array:
                flat = self._flattened(node.child_by_field_name("type"))
                if flat is not None:  # serde writes the inner struct's keys into this map
                    for f in flat:
                        fields.append(FieldLayout(index=len(fields), name=f.name, type=f.type, required=f.required,
                                                  default=f.default, note=f.note))
                    continue
            if attrs.serde_has("skip") or (attrs.serde_has("skip_serializing") and attrs.serde_has(
                    "skip_deserializing")):
                continue
            for key, value in attrs.serde:
                if key == "with" and value == "serde_bytes":
                    continue  # modelled: bytes
                if key in ("flatten", "with", "serialize_with", "deserialize_with", "borrow", "getter"):
                    self.crate.warn("serde-attribute", item.file, node,
                                    f"{item.name}.{rust_name}: #[serde({key})] is not modelled")
            wire_name = attrs.serde_value("rename") or _rename_all(rust_name, rename_all)
            type_node = node.child_by_field_name("type")
            if attrs.serde_value("with") == "serde_bytes":
                type_str, rust = "bytes", _text(type_node)
            else:
                type_str, rust = self.wire(type_node, item.file, f"{item.name}.{rust_name}")
            optional_type = _text(type_node).startswith(("Option<", "std::option::Option<"))
            has_default = attrs.serde_has("default") or struct_default
            skip_if = attrs.serde_value("skip_serializing_if")
            required = not (has_default or skip_if or (optional_type and not array))
            note_parts = [f"Rust {rust}"]
            if skip_if:
                note_parts.append(f"skip_serializing_if {skip_if}")
            fl = FieldLayout(index=len(fields), name=wire_name, type=type_str, required=required,
                             note="; ".join(note_parts))
            if not required:
                default = _default_of(type_node, attrs.serde_value("default"))
                if default is not _NONE:
                    fl.default = default
            fields.append(fl)
            self.locations[f"{name}.{wire_name}"] = f"{item.file}:{node.start_point[0] + 1}"
        self._busy.discard(name)
        self._generics = outer_generics
        self.messages[name] = MessageLayout(
            encoding="array" if array else "map", direction="both", fields=fields, defined_in=item.file,
            note=f"Rust struct {item.name}" + (f" ({', '.join(sorted(derives & _SERDE))})" if derives else "")
            + ("; deny_unknown_fields" if item.attrs.serde_has("deny_unknown_fields") else ""))


_SERDE = {"Serialize", "Deserialize", "Serialize_tuple", "Deserialize_tuple"}
#: the tensor form of ECP-FRAME-7, ``[dtype, shape, data]``, as an array struct's field names
_TENSOR_FIELDS = ["dtype", "shape", "data"]
_NONE = object()


def _default_of(type_node, default_fn: str | None) -> Any:
    """The value ``Default::default()`` gives for simple types; ``_NONE`` when unknown."""
    if default_fn:
        return _NONE  # a named function: its value is not read
    text = _text(type_node)
    if text.startswith("Option<"):
        return None
    if text in _INTS:
        return 0
    if text in ("f32", "f64"):
        return 0.0
    if text == "bool":
        return False
    if text == "String":
        return ""
    if text.split("<")[0] in _SEQ:
        return []
    if text.split("<")[0] in _MAPS:
        return {}
    return _NONE


def extract_rust(path: str | Path, names: dict[str, str] | None = None, role: str = "frontend",
                 vllm_version: str | None = None) -> RustExtraction:
    """The layout of the Rust crate (or source directory) at ``path``.

    ``names`` maps Rust type names to the Python class names they copy; ``role`` is the
    part the crate plays (``frontend``: it sends requests and reads outputs; ``engine``).
    Raises :class:`RustSourceError` when ``path`` holds no ``.rs`` file or the grammar is
    missing.
    """
    if role not in ROLES:
        raise RustSourceError(f"role {role!r} is not one of {', '.join(ROLES)}")
    root = Path(path)
    if not root.is_dir():
        raise RustSourceError(f"{root} is not a directory")
    crate = _Crate(root, names or {})
    crate.read()
    if not crate.files:
        raise RustSourceError(f"{root} holds no .rs file")
    b = _Builder(crate)
    for item in crate.items.values():
        if item.kind == "struct" and item.attrs.derives & _SERDE:
            b.message(item)
        elif item.kind == "enum" and item.attrs.derives & {"Serialize_repr", "Deserialize_repr"}:
            b.enum(item)
    for rust in crate.hand_written:
        item = crate.items.get(rust)
        if item is None or not item.attrs.derives & _SERDE:
            b._hand_written(rust)
    b.not_described = [n for n in b.not_described if n not in b.messages]
    request_types = []
    rt = crate.items.get(next((r for r, p in crate.names.items() if p == "EngineCoreRequestType"),
                              "EngineCoreRequestType"))
    if rt is not None and rt.kind == "enum":
        values = b.discriminants(rt)
        for member, value in values.items():
            request_types.append(RequestTypeLayout(byte=f"{value:02x}", name=member, on_wire=True))
            b.locations[f"request type 0x{value:02x}"] = b.locations.pop(f"enum EngineCoreRequestType.{member}", "")
        b.locations.pop("enum EngineCoreRequestType", None)
    utility: dict[str, UtilityMethodLayout] = {}
    for method, (file, line, count) in crate.utility_calls.items():
        params = None if count is None else [UtilityParamLayout(name=None, type="any") for _ in range(count)]
        utility[method] = UtilityMethodLayout(result="any", params=params)
        b.locations[f"utility {method}"] = f"{file}:{line}"
    version = vllm_version or "unknown"
    layout = Layout(
        format=FORMAT, name=f"rust:{root.resolve().name}", vllm_version=version,
        source=f"extracted from the Rust sources in {root.resolve().name}/ by `ecp spec layout --from-rust` "
               f"({EXTRACTOR_VERSION}); a {role}'s copy of the protocol",
        messages=b.messages, enums=b.enums, request_types=request_types, utility_methods=utility,
        not_described=b.not_described,
        provenance=Provenance(vllm_version=version, extractor=EXTRACTOR_VERSION, tree=f"rust-{role}",
                              warnings=[str(w) for w in crate.warnings],
                              locations=dict(sorted((k, v) for k, v in b.locations.items() if v))),
    )
    return RustExtraction(layout, crate.warnings, crate.files)


def rust_role(layout: Layout) -> str | None:
    """``frontend`` / ``engine`` for a layout read from Rust, ``None`` otherwise."""
    prov = layout.provenance
    if prov is None or not prov.extractor.startswith("rust-") or not prov.tree.startswith("rust-"):
        return None
    return prov.tree[len("rust-"):]
