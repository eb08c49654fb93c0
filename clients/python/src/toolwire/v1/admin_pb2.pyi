from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
SOURCE_STATE_DOWN: SourceState
SOURCE_STATE_RETRYING: SourceState
SOURCE_STATE_STATIC: SourceState
SOURCE_STATE_UNSPECIFIED: SourceState
SOURCE_STATE_UP: SourceState

class BatchInFlight(_message.Message):
    __slots__ = ["age", "batch_id", "caller_id", "calls", "calls_running", "detached", "running", "session_id", "started"]
    AGE_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    CALLER_ID_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    CALLS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    DETACHED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    age: _duration_pb2.Duration
    batch_id: str
    caller_id: str
    calls: int
    calls_running: int
    detached: bool
    running: _containers.RepeatedCompositeFieldContainer[CallInFlight]
    session_id: str
    started: _timestamp_pb2.Timestamp
    def __init__(self, batch_id: _Optional[str] = ..., caller_id: _Optional[str] = ..., session_id: _Optional[str] = ..., calls: _Optional[int] = ..., calls_running: _Optional[int] = ..., started: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., age: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., detached: bool = ..., running: _Optional[_Iterable[_Union[CallInFlight, _Mapping]]] = ...) -> None: ...

class CallInFlight(_message.Message):
    __slots__ = ["age", "call_id", "index", "started", "tool_name"]
    AGE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    age: _duration_pb2.Duration
    call_id: str
    index: int
    started: _timestamp_pb2.Timestamp
    tool_name: str
    def __init__(self, call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., index: _Optional[int] = ..., started: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., age: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class EngineStats(_message.Message):
    __slots__ = ["abandoned", "batches", "buffered_bytes", "callers", "calls_running", "session_waiting", "slot_waiters", "waiting_to_report"]
    ABANDONED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    BUFFERED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CALLERS_FIELD_NUMBER: _ClassVar[int]
    CALLS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    SESSION_WAITING_FIELD_NUMBER: _ClassVar[int]
    SLOT_WAITERS_FIELD_NUMBER: _ClassVar[int]
    WAITING_TO_REPORT_FIELD_NUMBER: _ClassVar[int]
    abandoned: int
    batches: int
    buffered_bytes: int
    callers: int
    calls_running: int
    session_waiting: int
    slot_waiters: int
    waiting_to_report: int
    def __init__(self, batches: _Optional[int] = ..., calls_running: _Optional[int] = ..., slot_waiters: _Optional[int] = ..., callers: _Optional[int] = ..., abandoned: _Optional[int] = ..., buffered_bytes: _Optional[int] = ..., waiting_to_report: _Optional[int] = ..., session_waiting: _Optional[int] = ...) -> None: ...

class GetServerStatusRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetServerStatusResponse(_message.Message):
    __slots__ = ["all_callers", "batch_count", "batches", "caller_id", "engine", "revision", "server_time", "sources", "tool_count"]
    ALL_CALLERS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    BATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    CALLER_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    TOOL_COUNT_FIELD_NUMBER: _ClassVar[int]
    all_callers: bool
    batch_count: int
    batches: _containers.RepeatedCompositeFieldContainer[BatchInFlight]
    caller_id: str
    engine: EngineStats
    revision: str
    server_time: _timestamp_pb2.Timestamp
    sources: _containers.RepeatedCompositeFieldContainer[SourceStatus]
    tool_count: int
    def __init__(self, revision: _Optional[str] = ..., tool_count: _Optional[int] = ..., sources: _Optional[_Iterable[_Union[SourceStatus, _Mapping]]] = ..., batches: _Optional[_Iterable[_Union[BatchInFlight, _Mapping]]] = ..., engine: _Optional[_Union[EngineStats, _Mapping]] = ..., all_callers: bool = ..., server_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., caller_id: _Optional[str] = ..., batch_count: _Optional[int] = ...) -> None: ...

class SourceStatus(_message.Message):
    __slots__ = ["kind", "last_error", "name", "since", "skipped", "state", "tool_count", "tools"]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_COUNT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    last_error: str
    name: str
    since: _timestamp_pb2.Timestamp
    skipped: int
    state: SourceState
    tool_count: int
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[_Union[SourceState, str]] = ..., tool_count: _Optional[int] = ..., last_error: _Optional[str] = ..., since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., tools: _Optional[_Iterable[str]] = ..., skipped: _Optional[int] = ...) -> None: ...

class SourceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
