"""Sticky client health (``ECP-ROB-3``): the first error wins and stays."""

from __future__ import annotations

import logging

log = logging.getLogger("ecp.reference.client")


class Health:
    """The client's health. Sans-IO: it only records.

    The receiver must call :meth:`fail` with every fatal error; only the first
    is kept, and :meth:`check` raises it for every later call.
    """

    __slots__ = ("_error",)

    def __init__(self) -> None:
        self._error: BaseException | None = None

    @property
    def healthy(self) -> bool:
        return self._error is None

    @property
    def error(self) -> BaseException | None:
        return self._error

    def fail(self, error: BaseException) -> bool:
        """Record ``error`` if it is the first; return whether it was."""
        if self._error is not None:
            log.debug("ignoring later client error %r (first: %r)", error, self._error)
            return False
        log.error("engine-core client failed: %s", error)
        self._error = error
        return True

    def check(self) -> None:
        """Raise the sticky error, if any."""
        if self._error is not None:
            raise self._error.with_traceback(None)  # raised again and again: do not grow its traceback
