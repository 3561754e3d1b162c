"""Client overhead benchmark (not a test).

1. Dispatch: a flat-out synthetic engine process sends steps of one output per
   stream to 1,000 concurrent streams (pre-encoded frames, no model); we
   measure outputs/s and tokens/s decoded by the client and dispatched to the
   1,000 consumer tasks.
2. Abort: 10,000 live streams are dropped at once (coalesced auto-abort), and
   separately aborted explicitly; we measure the time until the engine has
   received every id, and the number of ABORT messages.

Usage: python -m benchmarks.client_overhead [--streams 1000] [--steps 200] [--tokens-per-output 1]
                                            [--aborts 10000]
Prints a JSON summary. The engine runs in its own process so the client's
event loop is measured alone.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import time


# ------------------------------------------------------------------ synthetic engine (own process)
def _engine_main(handshake_address: str, mode: str, n: int, steps: int, tokens: int, conn) -> None:

    import zmq

    from ecp.spec import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, FinishReason, decode_input, encode_outputs

    from benchmarks.hop_floor import ecp_engine  # one raw-frame engine for the client benchmarks

    ctx = zmq.Context()
    io = ecp_engine(ctx, handshake_address, max_num_seqs=n)
    dealer, push = io.sockets["input[0]"], io.sockets["output[0]"]

    ids = []
    while len(ids) < n:
        msg = decode_input(dealer.recv_multipart())
        assert isinstance(msg, EngineCoreRequest)
        ids.append(msg.request_id)
    conn.send("added")
    if mode == "dispatch":
        tok = list(range(tokens))
        step = encode_outputs(EngineCoreOutputs(outputs=[EngineCoreOutput(i, tok) for i in ids]))
        last = encode_outputs(EngineCoreOutputs(outputs=[
            EngineCoreOutput(i, tok, finish_reason=FinishReason.LENGTH) for i in ids]))
        conn.recv()  # go
        for _ in range(steps - 1):
            push.send_multipart(step)
        push.send_multipart(last)
    else:
        for phase in range(2):  # auto-abort burst, then explicit abort
            if phase == 1:
                for _ in range(n):
                    assert isinstance(decode_input(dealer.recv_multipart()), EngineCoreRequest)
                conn.send("added")
            seen, messages = 0, 0
            while seen < n:
                msg = decode_input(dealer.recv_multipart())
                assert isinstance(msg, list)  # an ABORT: the request ids
                seen += len(msg)
                messages += 1
            conn.send((time.monotonic(), seen, messages))
    conn.recv()  # done
    io.close(0)
    ctx.term()


async def _client(n: int, mode: str, steps: int, tokens: int, check_limits: bool = True):
    from ecp.reference.client import ClientConfig, EngineCoreClient
    from ecp.spec import DEFAULT_LIMITS, DecodeLimits, EngineCoreRequest, SamplingParams

    # check_limits=False raises the collection/depth limits above the frame size, so the codec
    # runs no check of its own besides frame lengths (no untyped-depth check, no header walk):
    # the difference from the default run is what enforcing ECP-FRAME-9 costs the client.
    limits = DEFAULT_LIMITS if check_limits else DecodeLimits(max_collection_len=DEFAULT_LIMITS.max_frame_bytes,
                                                              max_depth=DEFAULT_LIMITS.max_frame_bytes)
    client = EngineCoreClient(ClientConfig(engine_count=1, ready_timeout_s=60, decode_limits=limits))
    await client.bind()
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=_engine_main,
                                           args=(client.handshake_address, mode, n, steps, tokens, child))
    proc.start()
    loop = asyncio.get_running_loop()
    try:
        await client.wait_ready()
        now = time.time()

        def request(i: int) -> EngineCoreRequest:
            return EngineCoreRequest(f"req-{i}", [1, 2, 3], None, SamplingParams(max_tokens=steps), None, now,
                                     None, None, None)

        streams = [await client.add(request(i)) for i in range(n)]
        assert await loop.run_in_executor(None, parent.recv) == "added"
        if mode == "dispatch":
            counts = [0, 0]

            async def consume(stream):
                async for out in stream:
                    counts[0] += 1
                    counts[1] += len(out.new_token_ids)

            consumers = [asyncio.ensure_future(consume(s)) for s in streams]
            t0 = time.perf_counter()
            parent.send("go")
            await asyncio.gather(*consumers)
            elapsed = time.perf_counter() - t0
            result = {"streams": n, "steps": steps, "outputs": counts[0], "tokens": counts[1],
                      "seconds": round(elapsed, 3), "outputs_per_s": round(counts[0] / elapsed),
                      "tokens_per_s": round(counts[1] / elapsed)}
        else:
            # each timed window starts with no garbage pending: a full collection of the 10,000 streams'
            # objects (15-25 ms) would otherwise land in one window or the next depending on how many
            # objects an ADD leaves behind, which measures the collector's schedule, not the abort path
            gc.collect()
            t0 = time.monotonic()
            for s in streams:
                await s.aclose()
            t_engine, seen, messages = await loop.run_in_executor(None, parent.recv)
            auto = {"ids": seen, "abort_messages": messages, "seconds": round(t_engine - t0, 4)}
            streams = [await client.add(request(n + i)) for i in range(n)]
            assert await loop.run_in_executor(None, parent.recv) == "added"
            gc.collect()
            t0 = time.monotonic()
            await client.abort([s.request_id for s in streams])
            t_engine, seen, messages = await loop.run_in_executor(None, parent.recv)
            explicit = {"ids": seen, "abort_messages": messages, "seconds": round(t_engine - t0, 4)}
            result = {"streams": n, "auto_abort": auto, "explicit_abort": explicit}
        parent.send("done")
        return result
    finally:
        await client.shutdown()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--tokens-per-output", type=int, default=1)
    parser.add_argument("--aborts", type=int, default=10000)
    args = parser.parse_args()
    dispatch = asyncio.run(_client(args.streams, "dispatch", args.steps, args.tokens_per_output))
    unchecked = asyncio.run(_client(args.streams, "dispatch", args.steps, args.tokens_per_output, check_limits=False))
    aborts = asyncio.run(_client(args.aborts, "abort", 1, 1))
    print(json.dumps({"dispatch": dispatch, "dispatch_without_limit_checks": unchecked, "abort": aborts}, indent=2))


if __name__ == "__main__":
    main()
