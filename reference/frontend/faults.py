"""Deliberate faults of the reference frontend (``ecp serve --bug NAME``).

The frontend's own faults bend decisions taken once when the app is built:
whether rejected requests that asked for a remote prefill are announced to the
engine (``ECP-REJECT-3``: exactly when a KV connector is configured), and which
``max_model_len`` it serves (``ECP-HS-9``: the minimum over the engines); and
whether every HTTP client's ``kv_transfer_params`` are forwarded (``ECP-SEC-5``: only when the
operator trusts them); one answer: what the HTTP client of a refused generation request gets (``ECP-REJECT-4``:
its error, ``ECP-HTTP-2``: a 4xx for its own mistake, ``ECP-HTTP-3``: the OpenAI error object).
The client's faults (the rest of ``--bug``) are ``reference/client/faults.py``.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..client.faults import FAULTS as CLIENT_FAULTS
from ..faults import Fault, check_names, table

NO_REJECTION_NOTIFICATION = "no-rejection-notification"
NOTIFY_WITHOUT_CONNECTOR = "notify-without-connector"
MAX_MODEL_LEN_MAXIMUM = "max-model-len-maximum"
NOTICE_INSTEAD_OF_ERROR = "notice-instead-of-error"
REFUSALS_AS_500 = "refusals-as-500"
PLAIN_ERROR_BODIES = "plain-error-bodies"
FORWARD_UNTRUSTED_KV_PARAMS = "forward-untrusted-kv-params"

FAULTS: dict[str, Fault] = table(
    Fault(NO_REJECTION_NOTIFICATION, "ECP-REJECT-3", "never sends the rejection notice, even with a KV connector"),
    Fault(NOTIFY_WITHOUT_CONNECTOR, "ECP-REJECT-3", "sends the rejection notice even without a KV connector"),
    Fault(MAX_MODEL_LEN_MAXIMUM, "ECP-HS-9", "serves the largest max_model_len of its engines, not the smallest"),
    Fault(NOTICE_INSTEAD_OF_ERROR, "ECP-REJECT-4",
          "a rejected request whose rejection was announced to the engine is answered 200 with no choices, "
          "its error lost"),
    Fault(REFUSALS_AS_500, "ECP-HTTP-2",
          "a generation request refused for the client's mistake (unknown model, pinned rank not served, prompt "
          "too long) is answered 500, not 4xx"),
    Fault(PLAIN_ERROR_BODIES, "ECP-HTTP-3",
          "a refused generation request's error body is {\"detail\": message}, not the OpenAI error object"),
    Fault(FORWARD_UNTRUSTED_KV_PARAMS, "ECP-SEC-5",
          "forwards every HTTP client's kv_transfer_params to the engine, as if --trust-request-kv-params "
          "were given"),
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

    def trust_kv_params(self, correct: bool) -> bool:
        """Whether every client's ``kv_transfer_params`` are forwarded, given the ``correct`` answer
        (the operator's ``--trust-request-kv-params``)."""
        return correct or FORWARD_UNTRUSTED_KV_PARAMS in self.names

    def rejection_answer(self, status: int, body: dict[str, Any], announced: bool) -> tuple[int, dict[str, Any]]:
        """The status and body the HTTP client of a refused generation request gets, given the correct
        ones (its error) and whether the rejection was announced to an engine."""
        if announced and NOTICE_INSTEAD_OF_ERROR in self.names:
            return 200, {"object": "text_completion", "choices": []}
        if REFUSALS_AS_500 in self.names and 400 <= status < 500:
            status = 500
        if PLAIN_ERROR_BODIES in self.names:
            error = body.get("error")
            body = {"detail": error.get("message") if isinstance(error, dict) else str(body)}
        return status, body

    def max_model_len(self, correct: int | None, reported: Iterable[int]) -> int | None:
        """The ``max_model_len`` to serve, given the ``correct`` one and every engine's ``reported`` one."""
        if MAX_MODEL_LEN_MAXIMUM in self.names:
            return max(reported, default=correct)
        return correct
