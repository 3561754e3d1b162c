"""Interop results: one JSON document per conformance run (:mod:`.results`), the runner of a
configured matrix of implementations x releases x roles (:mod:`.matrix`), the static results site
(:mod:`.site`) and the check of a submission from elsewhere (:mod:`.check`). ``docs/interop-site.md``."""
