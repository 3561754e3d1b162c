"""``--adapter reference_adapters:bug_<knob>``: the reference engine in threads with one bug knob;
``reference_adapters:release_0_32``: the reference engine in threads speaking vLLM 0.32 (paced: 0.25 ms a
step).

``max_model_len`` is kept small so that requests "as long as the engine allows" (abort cases)
stay short when a knob lets them run to the end; a 1 ms step keeps them from finishing before
the harness has seen their first output when the machine is loaded (else the abort cases
cannot judge and say UNSUPPORTED).
"""

from ecp.reference.engine.config import BUGS
from ecp.reference.engine.launcher import launch


def __getattr__(name: str):
    if name.startswith("release_"):  # release_0_32: the reference engine speaking vLLM 0.32
        release = name[len("release_"):].replace("_", ".")
        # paced (0.25 ms a step) so that the abort cases' requests still run when their ABORT lands
        return lambda handshake_address, engine_count: launch(handshake_address, engine_count, mode="thread",
                                                              vllm=release, max_model_len=512,
                                                              step_time_ms=0.25)
    if name.startswith("bug_") and name[4:] in BUGS:
        knob = name[4:]
        return lambda handshake_address, engine_count: launch(handshake_address, engine_count, mode="thread",
                                                              bug=[knob], max_model_len=512,
                                                              step_time_ms=1.0)
    raise AttributeError(name)


def paced(handshake_address: str, engine_count: int):
    """The correct reference engine with a 0.25 ms step: a request "as long as the engine allows"
    (4,096 tokens) then lasts >= 1 s, so the abort cases can judge even when the harness is
    descheduled for a while on a loaded machine (flat out it can finish in well under 100 ms)."""
    return launch(handshake_address, engine_count, mode="thread", step_time_ms=0.25)


class _Stuck:
    """What ``stuck`` returns: one thread that waits until stopped, never connecting."""

    def __init__(self) -> None:
        import threading

        self._release = threading.Event()
        self._thread = threading.Thread(target=self._wait_for_nothing, name="stuck-engine", daemon=True)
        self._thread.start()

    def _wait_for_nothing(self) -> None:
        self._release.wait(60)

    def stop(self) -> None:
        self._release.set()
        self._thread.join(5)


def stuck(handshake_address: str, engine_count: int):
    """An adapter whose engine thread never says HELLO (the report must show where it waits)."""
    return _Stuck()
