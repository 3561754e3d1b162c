"""Deliberate faults of the reference frontend (``ecp serve --bug NAME``).

The frontend's own faults bend decisions taken once when the app is built:
whether rejected requests that asked for a remote prefill are announced to the
engine (``ECP-REJECT-3``: exactly when a KV connector is configured), and which
``max_model_len`` it serves (``ECP-HS-9``: the minimum over the engines).
The client's faults (the rest of ``--bug``) are ``reference/client/faults.py``.
"""

from __future__ import annotations

from typing import Iterable

from ..client.faults import FAULTS as CLIENT_FAULTS
from ..faults import Fault, check_names, table

NO_REJECTION_NOTIFICATION = "no-rejection-notification"
NOTIFY_WITHOUT_CONNECTOR = "notify-without-connector"
MAX_MODEL_LEN_MAXIMUM = "max-model-len-maximum"

FAULTS: dict[str, Fault] = table(
    Fault(NO_REJECTION_NOTIFICATION, "ECP-REJECT-3", "never sends the rejection notice, even with a KV connector"),
    Fault(NOTIFY_WITHOUT_CONNECTOR, "ECP-REJECT-3", "sends the rejection notice even without a KV connector"),
    Fault(MAX_MODEL_LEN_MAXIMUM, "ECP-HS-9", "serves the largest max_model_len of its engines, not the smallest"),
)

#: Every name ``ecp serve --bug`` accepts: the frontend's faults, then the client's.
SERVE_FAULTS: dict[str, Fault] = {**FAULTS, **CLIENT_FAULTS}


def check_serve_faults(names: Iterable[str]) -> frozenset[str]:
    """``names`` as a set; ``ValueError`` listing the known ones if any is unknown."""
    return check_names(names, SERVE_FAULTS, "ecp serve")


class FrontendFaults:
    """The frontend's faults among ``names`` (the client's are left to the client)."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = frozenset(n for n in names if n in FAULTS)

    def notify_rejections(self, correct: bool) -> bool:
        """Whether to announce rejections, given the ``correct`` answer."""
        if NO_REJECTION_NOTIFICATION in self.names:
            return False
        if NOTIFY_WITHOUT_CONNECTOR in self.names:
            return True
        return correct

    def max_model_len(self, correct: int | None, reported: Iterable[int]) -> int | None:
        """The ``max_model_len`` to serve, given the ``correct`` one and every engine's ``reported`` one."""
        if MAX_MODEL_LEN_MAXIMUM in self.names:
            return max(reported, default=correct)
        return correct
