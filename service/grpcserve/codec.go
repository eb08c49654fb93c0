package grpcserve

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// messageCodec is gRPC's proto codec with one change: a message is encoded
// into a pooled buffer of the next power of two of its size. gRPC's own
// codec takes buffers from its default pool, whose tiers jump from 32 KiB
// to 1 MiB, so a 100 KiB result waiting in the transport for a slow reader
// held a 1 MiB buffer: ten times what MaxStreamBufferBytes accounts for.
type messageCodec struct {
	encoding.CodecV2 // gRPC's proto codec: Unmarshal and Name
}

// messageBuffers holds buffers of 32 KiB to 64 MiB; smaller messages go to
// gRPC's own codec (its tiers are close there) and larger ones are
// allocated.
var messageBuffers = func() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26)
	if err != nil {
		panic(err) // the exponents are constants
	}
	return p
}()

func newMessageCodec() grpc.ServerOption {
	return grpc.ForceServerCodecV2(messageCodec{defaultProtoCodec()})
}

// defaultProtoCodec is gRPC's own proto codec, which the google.golang.org/grpc
// package registers.
func defaultProtoCodec() encoding.CodecV2 {
	return encoding.GetCodecV2(grpcproto.Name)
}

func (c messageCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(encoded); ok {
		return e.data, nil // noteUnary's (unary.go)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	return c.marshal(m, proto.Size(m))
}

// marshal encodes m, whose proto.Size is size.
func (c messageCodec) marshal(m proto.Message, size int) (mem.BufferSlice, error) {
	if mem.IsBelowBufferPoolingThreshold(size) {
		return marshalSmall(m, size)
	}
	if size <= 32<<10 {
		return c.CodecV2.Marshal(m)
	}
	buf := messageBuffers.Get(size)
	// UseCachedSize reuses the proto.Size just computed; the message is not
	// changed meanwhile (one writer sends it).
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		messageBuffers.Put(buf)
		return nil, err
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, messageBuffers)}, nil
}

// smallMessage is a small message's encoding as gRPC takes it, a
// BufferSlice of one SliceBuffer, in one allocation: gRPC's own codec
// makes the slice and boxes the SliceBuffer separately, and sizes the
// message again. Most events are small (a CallStarted is a few dozen
// bytes), and each is one of these.
type smallMessage struct {
	slice [1]mem.Buffer
	data  mem.SliceBuffer
}

// marshalSmall encodes m, whose proto.Size is size, below gRPC's pooling
// threshold: into a buffer of exactly its size, as gRPC's codec does (it
// pools no buffer that small either).
func marshalSmall(m proto.Message, size int) (mem.BufferSlice, error) {
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(make([]byte, 0, size), m)
	if err != nil {
		return nil, err
	}
	s := &smallMessage{data: out}
	s.slice[0] = &s.data // a pointer to a field: no allocation for the interface
	return s.slice[:], nil
}
