package grpcsource

import (
	"bytes"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// answerCodec is gRPC's proto codec, but a response whose strings are not
// UTF-8 is read with those strings mended (U+FFFD), where the proto codec
// refuses it. proto3 strings must be UTF-8, but a server not written in
// Go may send them unchecked (C++ logs, and sends): the call was made,
// and "gRPC status Internal: grpc: failed to unmarshal the received
// message: … contains invalid UTF-8" reported it as failed, inviting the
// model to make it again. (protojson refuses a proto2 string that is not
// UTF-8 too: see mendStrings.)
type answerCodec struct{ encoding.CodecV2 }

func newAnswerCodec() answerCodec { return answerCodec{encoding.GetCodecV2("proto")} }

func (c answerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	m, ok := v.(*dynamicpb.Message)
	if err == nil || !ok {
		return err
	}
	mended, changed := mendWire(data.Materialize(), m.Descriptor(), 0)
	if !changed {
		return err
	}
	proto.Reset(m)
	if proto.Unmarshal(mended, m) != nil {
		return err
	}
	return nil
}

// mendWire returns the wire form b of a message of type md with what is
// not UTF-8 in its string fields, and its messages', replaced by U+FFFD,
// and whether it changed any; it leaves b as it is where it cannot read
// it, for the codec to refuse.
func mendWire(b []byte, md protoreflect.MessageDescriptor, depth int) ([]byte, bool) {
	if depth > protowireMaxDepth {
		return b, false
	}
	var out []byte
	changed := false
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return b, false
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return b, false
		}
		field := rest[:n+m]
		rest = rest[n+m:]
		fd := md.Fields().ByNumber(num)
		if typ == protowire.BytesType && fd != nil {
			v, _ := protowire.ConsumeBytes(field[n:])
			var nv []byte
			switch {
			case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
				nv = bytes.ToValidUTF8(v, []byte("\uFFFD"))
			case fd.Kind() == protoreflect.MessageKind:
				if mv, ok := mendWire(v, fd.Message(), depth+1); ok {
					nv = mv
				}
			}
			if nv != nil {
				if !changed {
					out = append(out, b[:len(b)-len(rest)-len(field)]...)
					changed = true
				}
				out = protowire.AppendTag(out, num, typ)
				out = protowire.AppendBytes(out, nv)
				continue
			}
		}
		if changed {
			out = append(out, field...)
		}
	}
	if !changed {
		return b, false
	}
	return out, true
}

// protowireMaxDepth is the nesting proto.Unmarshal reads at most.
const protowireMaxDepth = 10000
