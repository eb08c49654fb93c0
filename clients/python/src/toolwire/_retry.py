"""Reading a refusal's google.rpc.RetryInfo.

A server's rate limit refuses a batch or a call with RESOURCE_EXHAUSTED and
says, in the grpc-status-details-bin trailer (a serialized google.rpc.Status
whose details are Anys), when to send it again. Debian has no package with
the google.rpc protos for Python (grpcio-status and googleapis-common-protos
are PyPI's only), so the two messages read here are declared to protobuf at
run time, in a descriptor pool of their own (never clashing with those
packages' when they are installed), from the well-known Any and Duration
that python3-protobuf ships:

    google.rpc.Status    { int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3; }
    google.rpc.RetryInfo { google.protobuf.Duration retry_delay = 1; }
"""

import functools

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, duration_pb2, message_factory

DETAILS_TRAILER = "grpc-status-details-bin"
RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo"


@functools.cache
def _messages():
    """The (Status, RetryInfo) message classes."""
    F = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    for wkt in (any_pb2, duration_pb2):
        pool.AddSerializedFile(wkt.DESCRIPTOR.serialized_pb)
    f = descriptor_pb2.FileDescriptorProto(
        name="toolwire/_google_rpc.proto",
        package="google.rpc",
        syntax="proto3",
        dependency=["google/protobuf/any.proto", "google/protobuf/duration.proto"],
    )
    status = f.message_type.add(name="Status")
    status.field.add(name="code", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL, json_name="code")
    status.field.add(name="message", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, json_name="message")
    status.field.add(name="details", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED, type_name=".google.protobuf.Any", json_name="details")
    info = f.message_type.add(name="RetryInfo")
    info.field.add(name="retry_delay", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".google.protobuf.Duration", json_name="retryDelay")
    pool.AddSerializedFile(f.SerializeToString())
    get = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
    if get is None:
        get = message_factory.MessageFactory(pool).GetPrototype
    return get(pool.FindMessageTypeByName("google.rpc.Status")), get(pool.FindMessageTypeByName("google.rpc.RetryInfo"))


def retry_delay_of(metadata):
    """The delay in seconds of the google.rpc.RetryInfo among the status
    details in metadata (trailing metadata as grpc or grpc.aio gives it:
    (key, value) pairs), or None when there is none or it is malformed."""
    Status, RetryInfo = _messages()
    for key, value in metadata or ():
        if key != DETAILS_TRAILER or not isinstance(value, bytes):
            continue
        try:
            status = Status.FromString(value)
            for detail in status.details:
                if detail.type_url == RETRY_INFO_TYPE_URL:
                    d = RetryInfo.FromString(detail.value).retry_delay
                    return max(0.0, d.seconds + d.nanos / 1e9)
        except Exception:  # noqa: BLE001 - malformed details say nothing about when to retry
            continue
    return None


def trailing_metadata(err):
    """err's trailing metadata, or () when it has none (a local failure)."""
    get = getattr(err, "trailing_metadata", None)
    if not callable(get):
        return ()
    try:
        return get() or ()
    except Exception:  # noqa: BLE001
        return ()
