"""Layouts: machine-readable descriptions of the protocol of one release.

* :mod:`.model`: the layout file format (:class:`~.model.Layout`), validated loading;
* :mod:`.types`: the wire-type grammar and which type accepts which;
* :mod:`.introspect`: the layout of the current :mod:`ecp.spec` code (vLLM 0.33);
* :mod:`.resolve`: file path / shipped release / ``current`` / git ref -> layout;
* :mod:`.wire`: a generic layout-driven encoder and checking decoder.
"""
