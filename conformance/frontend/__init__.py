"""The frontend role of the conformance harness: the harness plays every engine.

``ecp conformance frontend -- COMMAND ...`` launches the frontend under test
with the placeholders ``{handshake_port}``, ``{handshake_address}``,
``{http_port}`` and ``{engine_count}`` filled in (vLLM's convention for a
frontend whose engines are headless and remote), joins its handshake with
scripted engines (:mod:`.scripted_engines`) that record every frame they receive, and
drives the frontend over HTTP (:mod:`.http_driver`). Cases live in
:mod:`.cases`; their ids are in the ``FE-…`` namespace.

Modules, one concept each:

* :mod:`.script` -- what a scripted engine does (sans-IO): token plans,
  holds, utility answers, ready payloads, handshake faults.
* :mod:`.output_forms` -- how a scripted engine writes its output messages:
  the encodings a frontend must read (short/long arrays, tolerant scalars,
  Python and Rust engine forms, tensors inline or in aux frames).
* :mod:`.recorder` -- every frame an engine receives or sends, timestamped
  and decoded (undecodable frames kept with their typed error).
* :mod:`.scripted_engines` -- the asyncio + pyzmq engine that joins the frontend's
  handshake (and the DP coordinator gate) and follows its script.
* :mod:`.launcher` -- the command template's placeholders and KV-connector
  options (the process itself is :class:`ecp.conformance.launch.CommandPeer`).
* :mod:`.http_driver` -- OpenAI completions/chat, dev endpoints, abort
  endpoints, health (httpx).
* :mod:`.sse` -- streaming responses on plain asyncio connections (HTTP/1.1 by
  h11, events by :class:`ecp.spec.sse.SseDecoder`), opened by the thousand and
  dropped in one pass.
* :mod:`.probe` -- what the frontend exposes (dev endpoints, abort API shape).
* :mod:`.session` -- launches (the frontend plus its engines), the shared one
  and fresh ones, on an event loop thread.
* :mod:`.catalog` / ``cases/`` -- the ``FE-…`` cases: catalogue entries, and
  per area a module with each case's body and the pytest test the runner collects.
"""
