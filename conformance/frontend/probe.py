"""What the frontend under test exposes, found once per launch (the routes and their
forms: spec/PROTOCOL.md section 14, ``ecp.spec.http``).

Cases that need something the frontend does not expose end UNSUPPORTED, not
FAIL: the vLLM dev endpoints (``GET /is_sleeping`` answers 404 without dev
mode: ``vllm/entrypoints/serve/dev/sleep/api_router.py`` in vLLM 0.33.0), an
explicit-abort endpoint (``/abort_requests`` in
vLLM and vllm-rs, ``/v1/abort_requests`` in FastDeploy), chat completions,
``POST /collective_rpc`` (a vLLM dev endpoint, ``vllm/entrypoints/serve/dev/rpc/api_router.py``),
and a configured KV connector (seen on the command line).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..outcomes import CaseFailure
from .http_driver import ABORT_APIS, AbortApi, HttpDriver

#: An id no frontend tracks: probing the abort endpoint with it aborts nothing.
PROBE_REQUEST_ID = "ecp-conformance-probe-no-such-request"

NOT_FOUND = (404, 405)


@dataclass
class Capabilities:
    model: str
    dev_endpoints: bool
    abort_api: AbortApi | None
    chat: bool
    kv_connector: bool
    collective_rpc: bool = False

    def describe(self) -> dict[str, object]:
        return {
            "model": self.model, "dev_endpoints": self.dev_endpoints,
            "abort_api": self.abort_api.path if self.abort_api else None,
            "chat": self.chat, "kv_connector": self.kv_connector, "collective_rpc": self.collective_rpc,
        }


async def _exposes(driver: HttpDriver, method: str, path: str, body: object = None) -> bool:
    """Whether ``path`` exists: anything but 404/405 says so. A route that breaks the connection
    exists too: the cases that use it judge that (a probe that failed would hide it from them)."""
    try:
        reply = await driver.request(method, path, json_body=body)
    except CaseFailure:
        return True
    return reply.status_code not in NOT_FOUND


async def probe(driver: HttpDriver, *, kv_connector: bool) -> Capabilities:
    """Ask the frontend what it serves; sets ``driver.model`` as a side effect."""
    models = await driver.models()
    if models:
        driver.model = models[0]
    dev = await _exposes(driver, "GET", "/is_sleeping")
    abort_api = None
    for api in ABORT_APIS:
        if await _exposes(driver, "POST", api.path, api.ids_body([PROBE_REQUEST_ID])):
            abort_api = api
            break
    chat = await _exposes(driver, "POST", "/v1/chat/completions", {"model": driver.model})
    # an empty body names no method: a frontend that has the route refuses it (400) without a call
    rpc = await _exposes(driver, "POST", "/collective_rpc", {})
    return Capabilities(driver.model, dev, abort_api, chat, kv_connector, rpc)
