"""``ecp spec diff``: what a layout change means for peers built against either side.

* :mod:`.rules`: the rule catalogue (stable ``DIFF-nnn`` ids, severities);
* :mod:`.compare`: layout vs layout -> findings (pure);
* :mod:`.report`: text / JSON / GitHub annotations;
* :mod:`.compat`: the cross-version interoperability table;
* :mod:`.commands`: ``ecp spec layout|diff|compat``.
"""
