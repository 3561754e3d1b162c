"""Frontend-role HTTP cases: what the HTTP surface (spec/PROTOCOL.md section 14) says beyond the
cases of the wire clauses, which drive the routes and cite their ``ECP-HTTP-n`` clauses."""

from __future__ import annotations

import msgspec

from ecp.conformance.frontend.cases._common import NO_SUCH_MODEL, SHORT_MAX_TOKENS, expect, unique
from ecp.conformance.frontend.session import FrontendManager
from ecp.conformance.outcomes import CaseFailure
from ecp.conformance.registry import case
from ecp.spec.http import ERROR_BODY


async def error_object(m: FrontendManager) -> None:
    """FE-HTTP-1."""
    fe = await m.shared()
    reply = await fe.driver.complete(unique("http"), SHORT_MAX_TOKENS, model=NO_SUCH_MODEL)
    what = f"a completion for model {NO_SUCH_MODEL!r}, which /v1/models does not list,"
    expect(400 <= reply.status_code < 500, f"{what} was answered HTTP {reply.status_code}, not a 4xx: "
                                           f"{reply.text[:200]}", "ECP-HTTP-2")
    try:
        msgspec.convert(reply.body, ERROR_BODY)
    except msgspec.ValidationError as exc:
        raise CaseFailure(f"{what} was refused (HTTP {reply.status_code}) with a body that is not the OpenAI "
                             f"error object {{\"error\": {{\"message\", \"type\", \"param\", \"code\"}}}}: {exc}; "
                             f"body {reply.text[:200]!r}") from None


@case("FE-HTTP-1")
def test_error_object(frontends):
    frontends.run(error_object)
