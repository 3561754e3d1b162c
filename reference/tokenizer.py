"""Tokenizers for the reference frontend.

Two implementations share one small interface (:class:`Tokenizer`):

* :class:`ByteTokenizer` -- the default, dependency-free byte-level
  tokenizer. Ids 0, 1, 2 are the special tokens ``<unk>``, ``<s>`` and
  ``</s>`` (EOS); ids 3..258 are the 256 byte values; any id >= 259 (which a
  synthetic engine with a larger vocabulary may emit) decodes to one printable
  ASCII byte, ``0x20 + (id - 259) % 95``. Decoding is therefore total: every
  non-negative id has a meaning, so a frontend never fails on an engine's
  token ids.
* :class:`HFTokenizer` -- a ``tokenizer.json`` loaded with the optional
  ``tokenizers`` library (``pip install engine-core-protocol[tokenizers]``).

Both provide *streaming* decoding (:meth:`Tokenizer.decode_stream`): a
receiver feeds token ids as they arrive and gets text deltas that never split
a UTF-8 character.
"""

from __future__ import annotations

import codecs
from typing import Protocol, Sequence


class DecodeStream(Protocol):
    def step(self, token_ids: Sequence[int]) -> str:
        """Feed new token ids; return the text they complete (may be empty)."""

    def flush(self) -> str:
        """End of stream: return any text still held back."""


class Tokenizer(Protocol):
    name: str
    eos_token_id: int | None
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...

    def decode_stream(self) -> DecodeStream: ...

    def apply_chat_template(self, messages: Sequence[dict]) -> str: ...


def render_chat(messages: Sequence[dict]) -> str:
    """The reference chat template: one ``<|role|>`` block per message, then
    the assistant prompt. Content may be a string or OpenAI content parts."""
    parts = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|{m.get('role', 'user')}|>\n{content}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


class ByteTokenizer:
    """Byte-level tokenizer (see the module docstring for the id layout)."""

    name = "byte"
    UNK, BOS, EOS = 0, 1, 2
    OFFSET = 3
    EXTENDED = OFFSET + 256

    def __init__(self, vocab_size: int = 32000) -> None:
        self.vocab_size = vocab_size
        self.eos_token_id = self.EOS
        self.special_ids = frozenset((self.UNK, self.BOS, self.EOS))

    def encode(self, text: str) -> list[int]:
        return [b + self.OFFSET for b in text.encode("utf-8")]

    def id_to_bytes(self, token_id: int) -> bytes:
        if token_id < self.OFFSET:
            return b""  # special tokens are skipped (skip_special_tokens)
        if token_id < self.EXTENDED:
            return bytes((token_id - self.OFFSET,))
        return bytes((0x20 + (token_id - self.EXTENDED) % 95,))

    def decode(self, token_ids: Sequence[int]) -> str:
        return b"".join(self.id_to_bytes(t) for t in token_ids).decode("utf-8", errors="replace")

    def byte_table(self) -> list[bytes]:
        """``id_to_bytes`` of every id of the vocabulary, built once."""
        table = self.__dict__.get("_byte_table")
        if table is None:
            table = self._byte_table = [self.id_to_bytes(i) for i in range(max(self.vocab_size, self.EXTENDED))]
        return table

    def decode_stream(self) -> "_ByteDecodeStream":
        return _ByteDecodeStream(self)

    def apply_chat_template(self, messages: Sequence[dict]) -> str:
        return render_chat(messages)


class _ByteDecodeStream:
    # Runs once per token on the frontend's hot path: one table lookup per id (the tokenizer's
    # table covers its vocabulary; an id past it takes the arithmetic) and the C UTF-8 decoder,
    # holding back an incomplete sequence itself.

    def __init__(self, tok: ByteTokenizer) -> None:
        self._tok = tok
        self._table = tok.byte_table()
        self._pending = b""

    def _bytes(self, token_ids: Sequence[int]) -> bytes:
        table = self._table
        try:
            return b"".join([table[t] for t in token_ids])  # (token ids are never negative)
        except IndexError:
            n = len(table)
            return b"".join([table[t] if t < n else self._tok.id_to_bytes(t) for t in token_ids])

    def step(self, token_ids: Sequence[int]) -> str:
        data = self._pending + self._bytes(token_ids) if self._pending else self._bytes(token_ids)
        text, used = codecs.utf_8_decode(data, "replace", False)
        self._pending = data[used:]
        return text

    def flush(self) -> str:
        data, self._pending = self._pending, b""
        return codecs.utf_8_decode(data, "replace", True)[0]


_EOS_CANDIDATES = ("</s>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<eos>", "<|im_end|>")


class HFTokenizer:
    """A ``tokenizer.json`` through the ``tokenizers`` library."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer as _Tok
        except ImportError as exc:  # pragma: no cover - depends on the optional extra
            raise RuntimeError("--tokenizer needs the optional 'tokenizers' extra: "
                               "pip install 'engine-core-protocol[tokenizers]'") from exc
        self._tok = _Tok.from_file(path)
        self.name = path
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.eos_token_id = next((i for i in map(self._tok.token_to_id, _EOS_CANDIDATES) if i is not None),
                                 None)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=True)

    def decode_stream(self) -> "_HFDecodeStream":
        return _HFDecodeStream(self._tok)

    def apply_chat_template(self, messages: Sequence[dict]) -> str:
        return render_chat(messages)


class _HFDecodeStream:
    def __init__(self, tok) -> None:
        from tokenizers.decoders import DecodeStream as _DS

        self._tok = tok
        self._stream = _DS(skip_special_tokens=True)

    def step(self, token_ids: Sequence[int]) -> str:
        out = []
        for t in token_ids:
            piece = self._stream.step(self._tok, t)
            if piece:
                out.append(piece)
        return "".join(out)

    def flush(self) -> str:
        return ""


def load_tokenizer(path: str | None, vocab_size: int = 32000) -> Tokenizer:
    """``None`` → :class:`ByteTokenizer`; a path → :class:`HFTokenizer`."""
    return ByteTokenizer(vocab_size) if path is None else HFTokenizer(path)
