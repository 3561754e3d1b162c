"""Static extraction of the wire layout from vLLM's own sources (``ecp spec layout --from-vllm``).

* :mod:`.source`: a ``.whl``, an unpacked wheel or a checkout, read in place;
* :mod:`.modules`: parsed modules and name resolution across them;
* :mod:`.structs`: annotations and classes -> layout types and messages;
* :mod:`.protocol`: the payloads, handshake maps, type bytes and UTILITY table;
* :mod:`.warnings`: the typed warning for what cannot be resolved statically.

Nothing of vLLM is imported or executed; torch is not needed.
"""

from .protocol import EXTRACTOR_VERSION, Extraction, extract
from .source import SourceError, open_tree
from .warnings import CODES, ExtractionWarning

__all__ = ["CODES", "EXTRACTOR_VERSION", "Extraction", "ExtractionWarning", "SourceError", "extract", "open_tree"]
