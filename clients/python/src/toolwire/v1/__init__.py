"""Generated stubs of the toolwire.v1 contract (protoc, grpc_python_plugin)."""
