"""Tensors and ndarrays on the wire (``ECP-FRAME-7``).

A tensor is the 3-element array ``[dtype, shape, data]``. ``data`` is either
msgpack ext type 3 whose body is the C-contiguous little-endian bytes (small
buffers), or a positive int that indexes the multipart message (1 is the first
aux frame; 0 would be the payload frame itself and is refused). :class:`Tensor` is the typed value; the
codec (:mod:`ecp.spec.codec`) decides inline vs aux frame on encode and
resolves indexes on decode, so users only ever see bytes.
"""

from __future__ import annotations

import math

# dtype name -> item size in bytes. Torch names (without ``torch.``) and numpy
# ``dtype.str`` forms both occur on the wire.
DTYPE_ITEMSIZE: dict[str, int] = {
    "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "float8_e4m3fn": 1, "float8_e5m2": 1,
    "|b1": 1, "|u1": 1, "|i1": 1, "<i2": 2, "<u2": 2, "<i4": 4, "<u4": 4, "<i8": 8, "<u8": 8,
    "<f2": 2, "<f4": 4, "<f8": 8,
}


class Tensor:
    """A dense array: dtype name, shape, and its raw little-endian bytes.

    Receivers must check ``len(data) == prod(shape) * itemsize`` before
    interpreting the buffer; :meth:`check` does so for known dtypes.

    Deliberately a plain immutable class, not a dataclass or Struct: msgspec
    would encode those natively as a map, while the wire form is the array
    ``[dtype, shape, data]`` produced by the codec's hooks.
    """

    __slots__ = ("dtype", "shape", "data")

    def __init__(self, dtype: str, shape: tuple[int, ...] | list[int], data: bytes) -> None:
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", tuple(shape))
        object.__setattr__(self, "data", bytes(data))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Tensor is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        return (self.dtype, self.shape, self.data) == (other.dtype, other.shape, other.data)

    def __hash__(self) -> int:
        return hash((self.dtype, self.shape, self.data))

    def __repr__(self) -> str:
        return f"Tensor(dtype={self.dtype!r}, shape={self.shape!r}, nbytes={len(self.data)})"

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def expected_nbytes(self) -> int | None:
        size = DTYPE_ITEMSIZE.get(self.dtype)
        if size is None:
            return None
        return math.prod(self.shape) * size

    def check(self) -> None:
        """Raise ``ValueError`` when shape/dtype and buffer length disagree."""
        if any((not isinstance(d, int)) or d < 0 for d in self.shape):
            raise ValueError(f"tensor shape must be non-negative ints, got {self.shape!r}")
        expected = self.expected_nbytes()
        if expected is not None and expected != len(self.data):
            raise ValueError(
                f"tensor {self.dtype}{list(self.shape)} needs {expected} bytes, buffer has {len(self.data)}"
            )

    @classmethod
    def from_numpy(cls, array) -> "Tensor":  # pragma: no cover - optional numpy
        import numpy as np

        arr = np.ascontiguousarray(array)
        return cls(arr.dtype.str if arr.dtype.str[0] in "<|" else arr.dtype.newbyteorder("<").str,
                   tuple(arr.shape), arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())

    def to_numpy(self):  # pragma: no cover - optional numpy
        import numpy as np

        names = {"bfloat16": None}
        if self.dtype in names:
            raise TypeError("bfloat16 has no numpy dtype")
        dt = np.dtype(self.dtype if self.dtype[0] in "<|>" else self.dtype).newbyteorder("<")
        return np.frombuffer(self.data, dtype=dt).reshape(self.shape)
