"""``ecp.reference.engine``: a reference engine core that speaks the protocol."""
