"""``ecp.reference.frontend``: the reference OpenAI-compatible frontend (``ecp serve``).

Layers, one concept per module:

* :mod:`.protocol` -- OpenAI bodies (msgspec), validation, OpenAI-style errors;
* :mod:`.ids` -- request-id conventions (as vLLM 0.33's Python frontend forms them);
* :mod:`.stop_strings` -- incremental stop-string matching;
* :mod:`.choice` -- one engine request's text state and partial result (sans-IO);
* :mod:`.registry` -- in-flight index for the abort APIs (base/response/external/internal ids);
* :mod:`.metrics` -- Prometheus metrics;
* :mod:`.serving` -- :class:`Frontend`: runs choices through the engine-core client;
* :mod:`.engine_client` -- what the frontend uses of the engine-core client (a ``Protocol``);
* :mod:`.app` -- the Starlette routes; :mod:`.http_server` -- uvicorn on a bound socket;
* :mod:`.launch` -- arguments, engine processes and the app, shared by :mod:`.server` (``serve()``)
  and :mod:`.api_servers` (``--api-server-count N``);
* :mod:`.in_thread` -- ``serve()`` in a thread of the calling process (the conformance harness's
  ``--adapter`` form);
* :mod:`.bench` -- ``ecp bench serve``.
"""
