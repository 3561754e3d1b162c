"""The typed warning of the extractor: a construct it could not resolve statically."""

from __future__ import annotations

from dataclasses import dataclass

#: warning code -> what the layout holds instead
CODES: dict[str, str] = {
    "unresolved-type": "an annotation that names nothing this tree defines or imports: the field is typed any",
    "external-type": "a type defined outside the vllm package (not a builtin, typing, torch or numpy type): any",
    "unsupported-class": "a class msgspec does not encode as a struct (no Struct, dataclass, NamedTuple, "
                         "TypedDict or Enum): any",
    "recursive-type": "a type alias that refers to itself: any",
    "name-clash": "two wire classes share a name: the first one is described",
    "struct-option": "a msgspec Struct option the layout format does not model (rename, tag, kw_only ...)",
    "default": "a default that is not a literal: the field is optional but its default is not recorded",
    "default-mismatch": "a default of None on a field whose annotation excludes None (the class replaces it "
                        "after construction): recorded as written; a sender that sends it is refused",
    "enum-value": "an enum member whose value is not a literal: left out",
    "request-type": "a request-type member that is not a one-byte bytes literal: left out",
    "missing": "a payload this tree does not define (the release has no such message, or it moved): left out",
    "value-type": "a value whose type the source does not declare (a HELLO/READY dict entry, an element of "
                  "a tuple payload): any",
    "tuple-payload": "a payload sent as a plain tuple that no frontend-side code builds: element types any",
    "utility-dynamic": "a UTILITY call whose method name is not a constant: not listed",
    "utility-unknown": "a UTILITY method the frontend calls but the engine core does not define: arguments "
                       "not documented, result any",
    "utility-result": "a UTILITY method without a return annotation that returns a value: result any",
}


@dataclass(frozen=True)
class ExtractionWarning:
    """``code`` (a key of the extractor's code table: :data:`CODES` here, ``ecp.spec.layout.rust.CODES``
    for a Rust crate), the file (``vllm/...``, ``src/...``) and line, and what was met.

    A receiver shows it to the user and keeps the layout: the layout records the
    construct as the code table says (``any``, no default, left out), never as a guess.
    """

    code: str
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.code}: {self.message}"
