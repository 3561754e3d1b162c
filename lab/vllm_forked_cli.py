"""vLLM's own CLI, with its engine-core processes forked instead of spawned.

Run with the peer's Python (it imports vLLM, not ecp); ``vllm_forked_serve.sh`` does:

    PEER=~/.cache/vllm-peer-0.33 lab/vllm_forked_serve.sh --headless --data-parallel-size 1 ...

vLLM's CPU platform forces the ``spawn`` start method (``check_and_update_config`` in
``vllm/platforms/cpu.py``), so each engine core imports vLLM again after ``vllm serve`` imported it:
about half of a launch's CPU. Forked, the engine core inherits those imports. The engine core that
runs is the same code (``EngineCoreProc.run_engine_core``) and speaks the same bytes; only its start
is cheaper. The engine-role suite relaunches vLLM's engine core 16 times at DP=1 (docs/interop.md),
which is what this is for.
"""

import multiprocessing
import sys

import vllm.v1.engine.utils as engine_utils


def _fork_context():
    # what vLLM's own get_mp_context does before a fork: let go of the OpenMP threads
    try:
        from vllm.utils.system_utils import _release_libgomp_threads
    except ImportError:
        pass
    else:
        _release_libgomp_threads()
    return multiprocessing.get_context("fork")


# CoreEngineProcManager looks the name up in its own module when it starts the engine cores
engine_utils.get_mp_context = _fork_context

from vllm.entrypoints.cli.main import main  # noqa: E402 - after the patch, as vLLM's CLI imports utils

if __name__ == "__main__":
    sys.argv[0] = "vllm"
    sys.exit(main())
