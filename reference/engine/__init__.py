"""``ecp.reference.engine``: a reference engine core that speaks the vLLM 0.33 protocol.

Run it with ``ecp engine --handshake-address tcp://127.0.0.1:PORT`` (or
``python -m ecp.reference.engine``), or start engines from Python::

    from ecp.reference.engine import launch

    handle = launch("ipc:///tmp/x/hs", engine_count=2, engine_start_index=0,
                    mode="thread",            # or "process": one OS process per rank
                    max_model_len=512, num_gpu_blocks=256, bug=["wrong-call-id"])
    ...                                       # the frontend owns the handshake ROUTER
    handle.stop()                             # in-flight requests get ABORT outputs; exit codes back

Layers: :mod:`.scheduler`, :mod:`.kv_cache`, :mod:`.core` (sans-IO engine core),
:mod:`.synthetic` (deterministic executor), :mod:`.kv_connector` (reference P/D
connector), :mod:`.server` (pyzmq), :mod:`.launcher`, :mod:`.commands` (CLI).
"""

from .config import BUGS, EngineConfig
from .launcher import EngineHandle, launch

__all__ = ["BUGS", "EngineConfig", "EngineHandle", "launch"]
