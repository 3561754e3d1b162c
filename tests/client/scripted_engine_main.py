"""A scripted engine in its own process (for the engine-kill test): handshake, then read inputs.

Usage: python scripted_engine_main.py HANDSHAKE_ADDRESS RANK. Exits on its own after 60 s.
"""

import asyncio
import sys

from ecp_client_testkit import ScriptedEngine


async def main(address: str, rank: int) -> None:
    engine = ScriptedEngine(rank)
    await engine.handshake(address)
    print("ready", flush=True)
    try:
        while True:
            await engine.recv(timeout=60)
    finally:
        engine.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
