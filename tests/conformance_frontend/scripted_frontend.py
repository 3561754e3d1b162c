"""A frontend that misbehaves over HTTP on purpose, for the frontend role's own tests.

``python scripted_frontend.py --behaviour B --handshake-port P --engine-count N --port H``
does the engine handshake with the reference client (so the harness's scripted
engines see a correct frontend on the wire), then serves a minimal HTTP/1.1 on
``127.0.0.1:H``: ``/health``, ``/v1/models`` and ``GET /is_sleeping``. When the
engines agree on ``is_sleeping`` it answers as a frontend should; when they
disagree (FE-UTIL-1's situation) it does ``B`` instead of answering with an error:

* ``close``: closes the connection without a status line;
* ``garbage``: writes bytes that are not HTTP, then closes;
* ``crash``: the process exits at once (status 3);
* ``hang``: never answers (keeps the connection open).

With ``--reserved-call-id`` it also breaks a wire rule outside the focus of the
is_sleeping cases: before each ``GET /is_sleeping`` it sends every engine a
utility call with the reserved call id -1 (``ECP-UTIL-12``: a frontend never
sends it).

With ``--coordinator`` the client runs its DP coordinator (INIT names it) and
``POST /v1/completions`` serves a non-streaming completion of a fixed 3-token
prompt through ``client.add`` (FE-DP-1's wave protocol with a coordinator);
``--completions`` serves it without a coordinator; ``--bug NAME`` passes one of
the client's faults.

The HTTP surface a frontend author might choose differently (spec/PROTOCOL.md
section 14): ``--model NAME`` serves the model under that name and refuses
completions naming another with 404 (``ECP-HTTP-4``); ``--ignore-strangers``
drops every handshake message from an identity outside the configured ranks
instead of failing the handshake (``ECP-HS-11`` allows either);
``--context-policy refuse|lower|unchecked|lower-blindly`` is what a completion whose prompt plus
``max_tokens`` exceeds the engines' minimum ``max_model_len`` gets (``ECP-HTTP-8``:
a 400, ``max_tokens`` lowered to the room left, or, wrongly, the ADD unchanged, or ``max_tokens``
lowered to the room left even when the prompt leaves none).

Every other route answers 404, so the cases that need them end UNSUPPORTED.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid

from ecp.reference.client import ClientConfig, EngineCoreClient
from ecp.spec import EngineCoreRequest, SamplingParams, UtilityRequest, encode_input

BEHAVIOURS = ("close", "garbage", "crash", "hang")
CONTEXT_POLICIES = ("refuse", "lower", "unchecked", "lower-blindly")
#: the completion's prompt: token ids the scripted engines echo or ignore
PROMPT = [1, 2, 3]
#: the call id -1 is the engine's (EEP_NOTIFICATION_CALL_ID): a frontend must never send it
RESERVED_CALL_ID = -1


def _response(status: int, reason: str, body: object) -> bytes:
    payload = json.dumps(body).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n\r\n").encode() + payload


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--behaviour", choices=BEHAVIOURS, required=True)
    parser.add_argument("--handshake-port", type=int, required=True)
    parser.add_argument("--engine-count", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reserved-call-id", action="store_true")
    parser.add_argument("--coordinator", action="store_true")
    # with --coordinator: a coordinator that runs no waves (as vLLM 0.33's for a dense model)
    parser.add_argument("--no-waves", action="store_true")
    parser.add_argument("--bug", action="append", default=[])
    parser.add_argument("--completions", action="store_true")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--ignore-strangers", action="store_true")
    parser.add_argument("--context-policy", choices=CONTEXT_POLICIES, default="refuse")
    args = parser.parse_args()

    client = EngineCoreClient(ClientConfig(
        engine_count=args.engine_count, handshake_address=f"tcp://127.0.0.1:{args.handshake_port}",
        transport="tcp", host="127.0.0.1", handshake_timeout_s=30, coordinator=args.coordinator,
        bugs=frozenset(args.bug)))
    if args.ignore_strangers:
        bend = client._faults.handshake   # around the client on purpose: its own policy fails the handshake

        def quiet_owner(owner: object) -> object:
            return _IgnoreStrangers(bend(owner))

        client._faults.handshake = quiet_owner
    await client.bind()
    if args.no_waves:
        # around the coordinator on purpose: it keeps the gate but ignores start_wave and wave_complete
        client._coordinator.on_engine_message = lambda msg: []
    await client.wait_ready()
    hung: list[asyncio.StreamWriter] = []   # kept open, never answered

    async def is_sleeping(writer: asyncio.StreamWriter) -> bool:
        """Answer (True) or misbehave (False: the connection is no longer usable)."""
        if args.reserved_call_id:
            # on purpose, around the client's rules (and the codec's encode_utility, which refuses it):
            # its own call ids are never negative
            frames = encode_input(UtilityRequest(0, RESERVED_CALL_ID, "is_sleeping", []))
            for rank in client.engine_ranks:
                await client._put(rank, frames)
        try:
            value = await client.is_sleeping()
        except Exception:  # noqa: BLE001 - the engines disagree: the one situation this frontend botches
            if args.behaviour == "crash":
                os._exit(3)
            if args.behaviour == "garbage":
                writer.write(b"\x00\x01 this is not HTTP \xff\r\n\r\n")
                await writer.drain()
            if args.behaviour == "hang":
                hung.append(writer)
                return False
            writer.close()
            return False
        writer.write(_response(200, "OK", {"is_sleeping": value}))
        return True

    def error(status: int, reason: str, message: str, param: str | None) -> bytes:
        return _response(status, reason, {"error": {"message": message, "type": reason.replace(" ", ""),
                                                    "param": param, "code": status}})

    async def complete(body: bytes) -> bytes:
        obj = json.loads(body or b"{}")
        if obj.get("model") not in (None, args.model):
            return error(404, "Not Found", f"The model `{obj.get('model')}` does not exist.", "model")
        max_tokens = int(obj.get("max_tokens") or 1)
        # one token per word of the prompt, at least PROMPT's
        words = len(str(obj.get("prompt") or "").split())
        prompt = list(PROMPT) + [7] * max(0, words - len(PROMPT))
        room = (client.max_model_len or 0) - len(prompt)
        if room < 1 and args.context_policy not in ("unchecked", "lower-blindly"):
            return error(400, "Bad Request", f"{len(prompt)} prompt tokens leave no room within max_model_len "
                                             f"{client.max_model_len}", "prompt")
        if max_tokens > room and args.context_policy == "refuse":
            return error(400, "Bad Request", f"{len(prompt)} prompt tokens + max_tokens {max_tokens} exceed "
                                             f"max_model_len {client.max_model_len}", "max_tokens")
        if max_tokens > room and args.context_policy in ("lower", "lower-blindly"):
            max_tokens = room
        stream = await client.add(EngineCoreRequest(
            f"cmpl-{uuid.uuid4().hex}", prompt, None, SamplingParams(max_tokens=max_tokens), None,
            time.time(), None, None, None))
        finish = None
        async for out in stream:
            if out.finish_reason is not None:
                finish = out.finish_reason.name.lower()
        return _response(200, "OK", {"choices": [{"index": 0, "text": "", "finish_reason": finish}]})

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                length = next((int(line.split(":", 1)[1]) for line in lines[1:]
                               if line.lower().startswith("content-length:")), 0)
                body = await reader.readexactly(length) if length else b""
                path = path.split("?", 1)[0]
                if path == "/health":
                    writer.write(_response(200, "OK", {}))
                elif path == "/v1/models":
                    writer.write(_response(200, "OK", {"object": "list", "data": [{"id": args.model}]}))
                elif method == "GET" and path == "/is_sleeping":
                    if not await is_sleeping(writer):
                        return
                elif method == "POST" and path == "/v1/completions" and (args.coordinator or args.completions):
                    writer.write(await complete(body))
                else:
                    writer.write(_response(404, "Not Found", {"detail": "Not Found"}))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", args.port)
    async with server:
        await server.serve_forever()
    return 0


class _IgnoreStrangers:
    """A handshake owner that drops, unanswered, every handshake message from an identity outside the
    configured ranks: the stranger never gets INIT and the others' handshake goes on (``ECP-HS-11``)."""

    def __init__(self, owner: object) -> None:
        self.owner = owner

    def __getattr__(self, name: str) -> object:
        return getattr(self.owner, name)

    def on_handshake_frames(self, frames: list[bytes]) -> list[list[bytes]]:
        identity = bytes(frames[0]) if frames else b""
        if len(identity) != 2 or int.from_bytes(identity, "little") not in self.owner.ranks:
            return []
        return self.owner.on_handshake_frames(frames)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
