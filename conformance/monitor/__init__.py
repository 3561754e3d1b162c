"""``ecp monitor``: a transparent, validating proxy between a frontend and its engines.

The monitor binds the handshake address the engines are told to use, joins the
real frontend's handshake on their behalf, and rewrites the socket addresses in
INIT so that every input, output and coordinator message also passes through
it. Each message is relayed unchanged and, in the same pass, checked against
the protocol; what it finds goes to a console summary, a JSON-lines event log,
per-violation transcripts, Prometheus metrics and a report at exit. A capture
(``--record``) can be re-checked offline (``--replay``) and read by
``ecp decode --file``.

Modules, one concept each:

=================  ===========================================================
``observed``       the record of one relayed message (direction, rank, socket)
``validator``      the validator interface and the codec-level validator
``machines``       the validator on the protocol machines (recording mode; the default)
``session``        everything done with one observed message (the part that
                   replay shares with the live relay)
``rewrite``        INIT address rewriting, and the ready payload's echo of it
``relay``          the ZeroMQ sockets and the relay loop
``capture``        the ``--record`` file format, written and read back
``metrics``        counters, the open-request gauge and the Prometheus view
``console``        the live console summary
``eventlog``       the JSON-lines event log
``transcripts``    one transcript file per violation
``report``         the report at exit, in the conformance report formats
``commands``       ``ecp monitor`` (arguments)
``run``            ``ecp monitor`` (wiring a live session or a replay)
=================  ===========================================================
"""
