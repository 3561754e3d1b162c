"""The frontend role of the conformance harness: the harness plays every engine.

``ecp conformance frontend -- COMMAND ...`` launches the frontend under test
with the placeholders ``{handshake_port}``, ``{handshake_address}``,
``{http_port}`` and ``{engine_count}`` filled in (vLLM's convention for a
frontend whose engines are headless and remote), joins its handshake with
scripted engines (:mod:`.engine`) that record every frame they receive, and
drives the frontend over HTTP (:mod:`.http_driver`). Cases live in
:mod:`.cases`; their ids are in the ``FE-…`` namespace.

Modules, one concept each:

* :mod:`.script` -- what a scripted engine does (sans-IO): token plans,
  holds, utility answers, ready payloads.
* :mod:`.recorder` -- every frame an engine receives or sends, timestamped,
  with awaitable predicates (no sleeps).
* :mod:`.engine` -- the asyncio + pyzmq engine that joins the frontend's
  handshake and follows its script.
* :mod:`.launcher` -- the frontend command template and process.
* :mod:`.http_driver` -- OpenAI completions/chat (streaming or not), dev
  endpoints, abort endpoints, health.
* :mod:`.probe` -- what the frontend exposes (dev endpoints, abort API shape).
* :mod:`.session` -- one frontend plus its engines, started and torn down
  together.
"""
