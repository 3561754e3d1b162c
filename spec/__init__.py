"""``ecp.spec``: the vLLM 0.33 engine-core wire protocol as typed messages and a sans-IO codec.

Import what you need from here::

    from ecp.spec import EngineCoreRequest, SamplingParams, encode_add, decode_input
"""

from .clauses import CLAUSES, Clause
from .codec import (
    ENGINE_DEAD, EngineDeadSentinel, InputMessage, request_type_of,
    decode_any, decode_coordinator_publication, decode_handshake, decode_init, decode_input, decode_outputs, decode_ready_response,
    encode_abort, encode_add, encode_engine_dead, encode_handshake, encode_input, encode_outputs,
    encode_payload, encode_start_dp_wave, encode_utility, to_builtins,
)
from .control import CoordinatorPublication, StartDPWave, UtilityRequest
from .enums import (
    AUX_FRAME_THRESHOLD, EEP_NOTIFICATION_CALL_ID, ENGINE_CORE_DEAD, FT_STATUS_CALL_ID, WIRE_REQUEST_TYPES,
    EngineCoreEventType, EngineStatusType, FinishReason, RequestOutputKind, RequestType,
)
from .errors import (
    DecodeError, FrameCountError, HandshakeError, HandshakeTimeout, InvalidMessageError, LimitExceeded, LocalProtocolError, ProtocolError,
    RemoteProtocolError, UnknownRequestType, UnsafeExtType,
)
from .frames import DIRECTIONS, Decoded, decode_frames, encode_decoded, parse_hex_frames
from .handshake import (
    COORDINATOR_READY, REQUIRED_READY_KEYS, XSUB_SUBSCRIBE, EngineCoreReadyResponse,
    EngineHandshakeMetadata, EngineZmqAddresses, Hello, Ready, engine_identity, rank_of_identity,
)
from .limits import DEFAULT_LIMITS, DecodeLimits
from .outputs import (
    EngineCoreEvent, EngineCoreOutput, EngineCoreOutputs, LogprobsLists, LogprobsTensors, PrefillStats,
    RequestError, SamplingMaskLists, SchedulerStats, UtilityOutput, UtilityResult,
)
from .request import (
    EngineCoreRequest, KvHintAction, KvHintsEnvelope, LateChunkingParams, LateInteractionParams, LoRARequest,
    MultiModalFeatureSpec, PoolingParams,
)
from .recover import (
    RecoveredAdd, RecoveredCall, recover_add, recover_add_frames, recover_utility, recover_utility_frames,
)
from .sampling import SamplingParams
from .tensors import Tensor

from .version import VLLM_RELEASE, VLLM_VERSION

__all__ = [name for name in dir() if not name.startswith("_")]
