"""Request-id conventions of the vLLM 0.33 Python frontend (vLLM 0.33.0:
``vllm/entrypoints/serve/engine/serving.py``, ``vllm/entrypoints/serve/middleware/x_request_id.py``).

* base id: the ``X-Request-Id`` header, else the body's ``request_id``, else
  16 random hex digits;
* response id: ``cmpl-<base>`` (completions) or ``chatcmpl-<base>`` (chat);
* external id (ADD #16): ``<response id>-<prompt index>`` for completions,
  the response id itself for chat;
* internal id (ADD #0, ABORT): ``<external id>-<8 hex>``; with ``n > 1`` each
  choice is its own engine request and gets its own internal id.
"""

from __future__ import annotations

import random

# Ids must be unique among requests in flight, not secret (anyone may abort anything through the
# abort APIs): a PRNG draw costs a fraction of the system call behind ``secrets``.
_draw = random.Random().getrandbits


def random_hex(digits: int) -> str:
    return format(_draw(4 * digits), f"0{digits}x")


def base_request_id(header_value: str | None, body_value: str | None) -> str:
    """``X-Request-Id`` beats the body's ``request_id``; else a random id."""
    for v in (header_value, body_value):
        if v:
            return v
    return random_hex(16)


def response_id(kind: str, base: str) -> str:
    return f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{base}"


def external_id(kind: str, resp_id: str, prompt_index: int) -> str:
    return resp_id if kind == "chat" else f"{resp_id}-{prompt_index}"


def internal_id(external: str) -> str:
    return f"{external}-{random_hex(8)}"
