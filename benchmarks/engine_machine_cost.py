"""What the engine's protocol machine costs a flat-out synthetic engine (not a test).

    python -m benchmarks.engine_machine_cost [--seconds 3] [--rounds 2] [--concurrency 64]

Runs the reference engine core's serving loop in this process, without sockets, two ways,
interleaved round by round: ``codec`` decodes each ADD with ``decode_input`` and encodes each
outputs message with ``encode_outputs`` (the checks skipped); ``machine`` feeds each ADD to an
``EngineConnection`` and sends each outputs message through ``EngineConnection.send`` (every
message checked against the tables, as ``reference/engine/server.py`` does). C requests stay in
flight (prompt 32 tokens, ``max_tokens`` 128, ``ignore_eos``); a finished request is replaced at
once. Prints output tokens/s and steps/s of each round and the ratio machine/codec.
"""

from __future__ import annotations

import argparse
import time

from ecp.reference.engine.config import EngineConfig
from ecp.reference.engine.core import EngineCore
from ecp.reference.engine.server import make_executor
from ecp.spec import EngineCoreRequest, SamplingParams, decode_input, encode_add, encode_outputs
from ecp.spec.machine import EngineConnection, Outputs

PROMPT = list(range(100, 132))


def run(way: str, seconds: float, concurrency: int) -> tuple[float, float]:
    """One round; returns (output tokens/s, steps/s)."""
    cfg = EngineConfig(step_time_ms=0)
    core = EngineCore(cfg, make_executor(cfg), engine_index=0, num_clients=1)
    machine = EngineConnection(0, bootstrapped=True, clients=1)
    machine.view.registered.add(0)
    seq = 0

    def submit() -> None:
        nonlocal seq
        frames = encode_add(EngineCoreRequest(f"b{seq}", PROMPT, None, SamplingParams(max_tokens=128, ignore_eos=True),
                                              None, 0.0, None, None, None))
        seq += 1
        if way == "machine":
            for event in machine.receive("input[0]", frames):
                core.add_request(event.request, 0, duplicate=event.duplicate)
        else:
            core.add_request(decode_input(frames), 0)

    for _ in range(concurrency):
        submit()
    steps = tokens = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        core.step()
        steps += 1
        for ob in core.take_outbox():
            if way == "machine":
                machine.send(Outputs(0, ob.client_index, ob.payload))
            else:
                encode_outputs(ob.payload)
            for out in ob.payload.outputs:
                tokens += len(out.new_token_ids)
                if out.finish_reason is not None:
                    submit()
    elapsed = time.perf_counter() - start
    return tokens / elapsed, steps / elapsed


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each way, interleaved")
    parser.add_argument("--concurrency", type=int, default=64, help="requests kept in flight")
    args = parser.parse_args(argv)
    results: dict[str, list[float]] = {"codec": [], "machine": []}
    print(f"# engine core loop in one process, {args.concurrency} in flight, {args.seconds:g} s rounds")
    print(f"{'round':>5}  {'way':<8} {'output tok/s':>13} {'steps/s':>9}")
    for i in range(args.rounds):
        for way in ("codec", "machine"):
            tok_s, steps_s = run(way, args.seconds, args.concurrency)
            results[way].append(tok_s)
            print(f"{i + 1:>5}  {way:<8} {tok_s:>13,.0f} {steps_s:>9,.0f}")
    ratio = sum(results["machine"]) / sum(results["codec"])
    print(f"machine / codec: {ratio:.3f}")
    return results


if __name__ == "__main__":
    main()
