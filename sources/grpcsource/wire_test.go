package grpcsource

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// rawCodec sends []byte as it is, and anything else as the proto codec
// does: a server answering bytes it made by hand.
type rawCodec struct{ encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.([]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// proto3File is a proto3 file: a message Rec of a string, a repeated
// string, a map of strings and a nested Rec, and a service P3 whose Get
// answers one and whose Watch streams them.
func proto3File() *descriptorpb.FileDescriptorProto {
	opt, rep := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	str, msg := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	field := func(name string, n int32, label *descriptorpb.FieldDescriptorProto_Label, typ *descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Label: label, Type: typ, JsonName: proto.String(name)}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	return &descriptorpb.FileDescriptorProto{
		Name: proto.String("p3.proto"), Package: proto.String("p3"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Rec"),
			Field: []*descriptorpb.FieldDescriptorProto{
				field("name", 1, opt, str, ""), field("tags", 2, rep, str, ""),
				field("labels", 3, rep, msg, ".p3.Rec.LabelsEntry"), field("inner", 4, opt, msg, ".p3.Rec"),
			},
			NestedType: []*descriptorpb.DescriptorProto{{
				Name:    proto.String("LabelsEntry"),
				Field:   []*descriptorpb.FieldDescriptorProto{field("key", 1, opt, str, ""), field("value", 2, opt, str, "")},
				Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			}},
		}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("P3"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Get"), InputType: proto.String(".p3.Rec"), OutputType: proto.String(".p3.Rec")},
				{Name: proto.String("Watch"), InputType: proto.String(".p3.Rec"), OutputType: proto.String(".p3.Rec"), ServerStreaming: proto.Bool(true)},
			},
		}},
	}
}

// TestProto3StringsThatAreNotUTF8 calls a proto3 server that answers
// strings that are not UTF-8, at every depth, as a server not written in
// Go may (C++ logs and sends them). gRPC's proto codec refused the
// answer, and the call the server had made came back as "gRPC status
// Internal: grpc: failed to unmarshal the received message: proto: field
// … contains invalid UTF-8", inviting the model to make it again. It now
// succeeds with the strings mended, unary and streaming.
func TestProto3StringsThatAreNotUTF8(t *testing.T) {
	t.Parallel()
	str := func(b []byte, n protowire.Number, s string) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), []byte(s))
	}
	var answer, entry, inner []byte
	answer = str(answer, 1, "caf\xe9")
	answer = str(str(answer, 2, "ok"), 2, "\xff")
	entry = str(str(entry, 1, "k\xfe"), 2, "v\xfd")
	answer = str(answer, 3, string(entry))
	inner = str(inner, 1, "\xc0")
	answer = str(answer, 4, string(inner))

	f := &fakeReflection{services: []string{"p3.P3"}, files: map[string]*descriptorpb.FileDescriptorProto{"p3.proto": proto3File()}}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{encoding.GetCodecV2("proto")}), grpc.UnknownServiceHandler(func(_ any, s grpc.ServerStream) error {
		return s.SendMsg(answer)
	}))
	gs.RegisterService(&grpc.ServiceDesc{ServiceName: "grpc.reflection.v1.ServerReflection", HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "ServerReflectionInfo", Handler: f.handle, ServerStreams: true, ClientStreams: true}}}, struct{}{})
	addr := serveOn(t, gs)

	s, reg, _ := newServices(t)
	if err := s.Sync(context.Background(), []Config{{Name: "p", Target: addr, Insecure: true}}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the server's tools", sourcetest.Has("p_P3_Get", "p_P3_Watch"))
	want := map[string]any{"name": "caf\uFFFD", "tags": []any{"ok", "\uFFFD"}, "labels": map[string]any{"k\uFFFD": "v\uFFFD"}, "inner": map[string]any{"name": "\uFFFD"}}

	res := call(t, context.Background(), reg, "p_P3_Get", `{}`, nil)
	var got map[string]any
	if res.IsError || json.Unmarshal(res.StructuredContent, &got) != nil {
		t.Fatalf("Get: %s", text(res))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}

	res = call(t, context.Background(), reg, "p_P3_Watch", `{}`, nil)
	var stream struct{ Messages []map[string]any }
	if res.IsError || json.Unmarshal(res.StructuredContent, &stream) != nil || len(stream.Messages) != 1 {
		t.Fatalf("Watch: %s", text(res))
	}
	if diff := cmp.Diff(want, stream.Messages[0]); diff != "" {
		t.Errorf("Watch (-want +got):\n%s", diff)
	}
}

// FuzzMendWire reads any bytes as a p3.Rec: mendWire never panics, what
// it mends needs no mending again, and a message whose only fault was a
// string not UTF-8 reads once mended.
func FuzzMendWire(f *testing.F) {
	file, err := protodesc.NewFile(proto3File(), nil)
	if err != nil {
		f.Fatal(err)
	}
	md := file.Messages().Get(0)
	f.Add([]byte("\x0a\x04caf\xe9\x12\x01\xff\x1a\x06\x0a\x01\xfe\x12\x01\xfd\x22\x03\x0a\x01\xc0"))
	f.Add([]byte("\x0a\x80"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mended, changed := mendWire(b, md, 0)
		if !changed {
			return
		}
		if _, again := mendWire(mended, md, 0); again {
			t.Errorf("mended %q into %q, which mends again", b, mended)
		}
		if bytes.Equal(bytes.ToValidUTF8(b, []byte("\uFFFD")), mended) {
			// Only strings were mended, in place.
			if err := proto.Unmarshal(mended, dynamicpb.NewMessage(md)); err != nil && strings.Contains(err.Error(), "UTF-8") {
				t.Errorf("mended %q into %q, which is refused: %v", b, mended, err)
			}
		}
	})
}
