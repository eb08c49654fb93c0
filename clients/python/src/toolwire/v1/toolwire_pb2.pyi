from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

BATCH_STATE_AWAITING_APPROVAL: BatchState
BATCH_STATE_CANCELLED: BatchState
BATCH_STATE_FINISHED: BatchState
BATCH_STATE_RUNNING: BatchState
BATCH_STATE_UNSPECIFIED: BatchState
DESCRIPTOR: _descriptor.FileDescriptor
ERROR_KIND_CANCELLED: ErrorKind
ERROR_KIND_DENIED: ErrorKind
ERROR_KIND_IDEMPOTENCY_CONFLICT: ErrorKind
ERROR_KIND_INTERNAL: ErrorKind
ERROR_KIND_INVALID_ARGUMENTS: ErrorKind
ERROR_KIND_NOT_PERMITTED: ErrorKind
ERROR_KIND_SKIPPED: ErrorKind
ERROR_KIND_TIMEOUT: ErrorKind
ERROR_KIND_TOOL_ERROR: ErrorKind
ERROR_KIND_UNKNOWN_TOOL: ErrorKind
ERROR_KIND_UNSPECIFIED: ErrorKind
TOOL_SOURCE_BUILTIN: ToolSource
TOOL_SOURCE_HTTP: ToolSource
TOOL_SOURCE_MCP: ToolSource
TOOL_SOURCE_REMOTE: ToolSource
TOOL_SOURCE_UNSPECIFIED: ToolSource

class AttachBatchRequest(_message.Message):
    __slots__ = ["after_seq", "batch_id"]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    batch_id: str
    def __init__(self, batch_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class BatchAccepted(_message.Message):
    __slots__ = ["batch_id", "lanes", "revision"]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    LANES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    lanes: _containers.RepeatedCompositeFieldContainer[Lane]
    revision: str
    def __init__(self, batch_id: _Optional[str] = ..., lanes: _Optional[_Iterable[_Union[Lane, _Mapping]]] = ..., revision: _Optional[str] = ...) -> None: ...

class BatchFinished(_message.Message):
    __slots__ = ["batch_id", "cancelled", "duration", "failed", "replayed", "skipped", "succeeded"]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    cancelled: int
    duration: _duration_pb2.Duration
    failed: int
    replayed: int
    skipped: int
    succeeded: int
    def __init__(self, batch_id: _Optional[str] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., skipped: _Optional[int] = ..., cancelled: _Optional[int] = ..., replayed: _Optional[int] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class BatchOptions(_message.Message):
    __slots__ = ["detach", "max_parallel", "sequential", "stop_on_error", "timeout"]
    DETACH_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_FIELD_NUMBER: _ClassVar[int]
    STOP_ON_ERROR_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    detach: bool
    max_parallel: int
    sequential: bool
    stop_on_error: bool
    timeout: _duration_pb2.Duration
    def __init__(self, sequential: bool = ..., max_parallel: _Optional[int] = ..., stop_on_error: bool = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., detach: bool = ...) -> None: ...

class CallAwaitingApproval(_message.Message):
    __slots__ = ["arguments", "call_id", "index", "reason", "tool_name"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    arguments: str
    call_id: str
    index: int
    reason: str
    tool_name: str
    def __init__(self, call_id: _Optional[str] = ..., index: _Optional[int] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CallProgress(_message.Message):
    __slots__ = ["call_id", "index", "message", "output", "progress", "total"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    index: int
    message: str
    output: str
    progress: float
    total: float
    def __init__(self, call_id: _Optional[str] = ..., index: _Optional[int] = ..., progress: _Optional[float] = ..., total: _Optional[float] = ..., message: _Optional[str] = ..., output: _Optional[str] = ...) -> None: ...

class CallResult(_message.Message):
    __slots__ = ["call_id", "content", "details", "duration", "error_kind", "index", "is_error", "original_size", "replayed", "structured_content", "tool_name", "truncated"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    ERROR_KIND_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    content: _containers.RepeatedCompositeFieldContainer[Content]
    details: str
    duration: _duration_pb2.Duration
    error_kind: ErrorKind
    index: int
    is_error: bool
    original_size: int
    replayed: bool
    structured_content: str
    tool_name: str
    truncated: bool
    def __init__(self, call_id: _Optional[str] = ..., index: _Optional[int] = ..., tool_name: _Optional[str] = ..., content: _Optional[_Iterable[_Union[Content, _Mapping]]] = ..., structured_content: _Optional[str] = ..., details: _Optional[str] = ..., is_error: bool = ..., error_kind: _Optional[_Union[ErrorKind, str]] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., replayed: bool = ..., truncated: bool = ..., original_size: _Optional[int] = ...) -> None: ...

class CallStarted(_message.Message):
    __slots__ = ["call_id", "index", "lane"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    index: int
    lane: int
    def __init__(self, call_id: _Optional[str] = ..., index: _Optional[int] = ..., lane: _Optional[int] = ...) -> None: ...

class CallToolRequest(_message.Message):
    __slots__ = ["call", "session_id"]
    CALL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    call: ToolCall
    session_id: str
    def __init__(self, call: _Optional[_Union[ToolCall, _Mapping]] = ..., session_id: _Optional[str] = ...) -> None: ...

class CallToolResponse(_message.Message):
    __slots__ = ["result"]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: CallResult
    def __init__(self, result: _Optional[_Union[CallResult, _Mapping]] = ...) -> None: ...

class CancelBatchRequest(_message.Message):
    __slots__ = ["batch_id", "reason"]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    reason: str
    def __init__(self, batch_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelBatchResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Content(_message.Message):
    __slots__ = ["image", "text"]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    image: ImageContent
    text: TextContent
    def __init__(self, text: _Optional[_Union[TextContent, _Mapping]] = ..., image: _Optional[_Union[ImageContent, _Mapping]] = ...) -> None: ...

class ExecuteBatchRequest(_message.Message):
    __slots__ = ["calls", "options", "session_id"]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    options: BatchOptions
    session_id: str
    def __init__(self, calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., session_id: _Optional[str] = ..., options: _Optional[_Union[BatchOptions, _Mapping]] = ...) -> None: ...

class ExecuteBatchResponse(_message.Message):
    __slots__ = ["accepted", "awaiting_approval", "finished", "progress", "result", "seq", "started"]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    AWAITING_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    accepted: BatchAccepted
    awaiting_approval: CallAwaitingApproval
    finished: BatchFinished
    progress: CallProgress
    result: CallResult
    seq: int
    started: CallStarted
    def __init__(self, accepted: _Optional[_Union[BatchAccepted, _Mapping]] = ..., started: _Optional[_Union[CallStarted, _Mapping]] = ..., progress: _Optional[_Union[CallProgress, _Mapping]] = ..., result: _Optional[_Union[CallResult, _Mapping]] = ..., finished: _Optional[_Union[BatchFinished, _Mapping]] = ..., awaiting_approval: _Optional[_Union[CallAwaitingApproval, _Mapping]] = ..., seq: _Optional[int] = ...) -> None: ...

class GetBatchRequest(_message.Message):
    __slots__ = ["batch_id"]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    def __init__(self, batch_id: _Optional[str] = ...) -> None: ...

class GetBatchResponse(_message.Message):
    __slots__ = ["batch_id", "finished", "last_seq", "results", "state"]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    finished: BatchFinished
    last_seq: int
    results: _containers.RepeatedCompositeFieldContainer[CallResult]
    state: BatchState
    def __init__(self, batch_id: _Optional[str] = ..., state: _Optional[_Union[BatchState, str]] = ..., results: _Optional[_Iterable[_Union[CallResult, _Mapping]]] = ..., finished: _Optional[_Union[BatchFinished, _Mapping]] = ..., last_seq: _Optional[int] = ...) -> None: ...

class ImageContent(_message.Message):
    __slots__ = ["data", "mime_type"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class Lane(_message.Message):
    __slots__ = ["call_ids", "index", "parallel"]
    CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    call_ids: _containers.RepeatedScalarFieldContainer[str]
    index: int
    parallel: bool
    def __init__(self, index: _Optional[int] = ..., call_ids: _Optional[_Iterable[str]] = ..., parallel: bool = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ["page_size", "page_token"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ["next_page_token", "revision", "tools"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    revision: str
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    def __init__(self, tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., revision: _Optional[str] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResolveApprovalRequest(_message.Message):
    __slots__ = ["approved", "approver", "batch_id", "call_id", "message"]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    APPROVER_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    approved: bool
    approver: str
    batch_id: str
    call_id: str
    message: str
    def __init__(self, batch_id: _Optional[str] = ..., call_id: _Optional[str] = ..., approved: bool = ..., message: _Optional[str] = ..., approver: _Optional[str] = ...) -> None: ...

class ResolveApprovalResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SearchToolsRequest(_message.Message):
    __slots__ = ["max_results", "query"]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    max_results: int
    query: str
    def __init__(self, query: _Optional[str] = ..., max_results: _Optional[int] = ...) -> None: ...

class SearchToolsResponse(_message.Message):
    __slots__ = ["revision", "tools", "total_matches"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MATCHES_FIELD_NUMBER: _ClassVar[int]
    revision: str
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    total_matches: int
    def __init__(self, tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., revision: _Optional[str] = ..., total_matches: _Optional[int] = ...) -> None: ...

class TextContent(_message.Message):
    __slots__ = ["text"]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ["annotations", "description", "input_schema", "name", "output_schema", "source", "timeout", "title"]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    annotations: ToolAnnotations
    description: str
    input_schema: str
    name: str
    output_schema: str
    source: ToolSource
    timeout: _duration_pb2.Duration
    title: str
    def __init__(self, name: _Optional[str] = ..., title: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[str] = ..., output_schema: _Optional[str] = ..., annotations: _Optional[_Union[ToolAnnotations, _Mapping]] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., source: _Optional[_Union[ToolSource, str]] = ...) -> None: ...

class ToolAnnotations(_message.Message):
    __slots__ = ["destructive", "idempotent", "open_world", "read_only"]
    DESTRUCTIVE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    OPEN_WORLD_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    destructive: bool
    idempotent: bool
    open_world: bool
    read_only: bool
    def __init__(self, read_only: bool = ..., destructive: bool = ..., idempotent: bool = ..., open_world: bool = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ["arguments", "call_id", "idempotency_key", "name", "timeout"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    arguments: str
    call_id: str
    idempotency_key: str
    name: str
    timeout: _duration_pb2.Duration
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class WatchToolsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class WatchToolsResponse(_message.Message):
    __slots__ = ["revision"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: str
    def __init__(self, revision: _Optional[str] = ...) -> None: ...

class ToolSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class BatchState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ErrorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
