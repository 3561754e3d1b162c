"""``--adapter reference_adapters:bug_<knob>``: the reference engine in threads with one bug knob.

``max_model_len`` is kept small so that requests "as long as the engine allows" (abort cases)
stay short when a knob lets them run to the end.
"""

from ecp.reference.engine.config import BUGS
from ecp.reference.engine.launcher import launch


def __getattr__(name: str):
    if name.startswith("bug_") and name[4:] in BUGS:
        knob = name[4:]
        return lambda handshake_address, engine_count: launch(handshake_address, engine_count, mode="thread",
                                                              bug=[knob], max_model_len=512)
    raise AttributeError(name)
