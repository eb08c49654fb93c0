package grpcsource

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// legacyFile is a proto2 file: a service Legacy whose Create answers a
// Record of a string, a repeated string, a map of strings and a nested
// Record. proto2 does not check strings for UTF-8 on the wire.
func legacyFile(t *testing.T) *protoregistry.Files {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	field := func(name string, n int32, label descriptorpb.FieldDescriptorProto_Label, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Label: label.Enum(), Type: typ.Enum(), JsonName: proto.String(name)}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("legacy.proto"), Package: proto.String("toolwire.test.legacy"), Syntax: proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Record"),
			Field: []*descriptorpb.FieldDescriptorProto{
				field("name", 1, opt, str, ""),
				field("tags", 2, rep, str, ""),
				field("labels", 3, rep, msg, ".toolwire.test.legacy.Record.LabelsEntry"),
				field("inner", 4, opt, msg, ".toolwire.test.legacy.Record"),
			},
			NestedType: []*descriptorpb.DescriptorProto{{
				Name:    proto.String("LabelsEntry"),
				Field:   []*descriptorpb.FieldDescriptorProto{field("key", 1, opt, str, ""), field("value", 2, opt, str, "")},
				Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			}},
		}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Legacy"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name: proto.String("Create"), InputType: proto.String(".toolwire.test.legacy.Record"), OutputType: proto.String(".toolwire.test.legacy.Record"),
			}},
		}},
	}
	files, err := protodesc.NewFiles(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{fd}})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

type legacyServer struct{ files *protoregistry.Files }

func (legacyServer) GetServiceInfo() map[string]grpc.ServiceInfo {
	return map[string]grpc.ServiceInfo{"toolwire.test.legacy.Legacy": {}}
}

// TestProto2StringsThatAreNotUTF8 calls a proto2 upstream whose answer
// holds strings that are not UTF-8, at every depth: protojson refused it,
// so a call the upstream had made (Create) came back as an error, inviting
// the model to make it again. It now succeeds with the strings mended.
func TestProto2StringsThatAreNotUTF8(t *testing.T) {
	t.Parallel()
	files := legacyFile(t)
	d, err := files.FindDescriptorByName("toolwire.test.legacy.Record")
	if err != nil {
		t.Fatal(err)
	}
	rec := d.(protoreflect.MessageDescriptor)
	created := 0
	gs := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		in := dynamicpb.NewMessage(rec)
		if err := stream.RecvMsg(in); err != nil {
			return err
		}
		created++
		out := dynamicpb.NewMessage(rec)
		f := rec.Fields()
		out.Set(f.ByName("name"), protoreflect.ValueOfString("caf\xe9"))
		tags := out.Mutable(f.ByName("tags")).List()
		tags.Append(protoreflect.ValueOfString("ok"))
		tags.Append(protoreflect.ValueOfString("\xff"))
		labels := out.Mutable(f.ByName("labels")).Map()
		labels.Set(protoreflect.ValueOfString("k\xfe").MapKey(), protoreflect.ValueOfString("v\xfe"))
		inner := out.Mutable(f.ByName("inner")).Message()
		inner.Set(f.ByName("name"), protoreflect.ValueOfString("deep\xff"))
		return stream.SendMsg(out)
	}))
	rpb.RegisterServerReflectionServer(gs, reflection.NewServerV1(reflection.ServerOptions{Services: legacyServer{files}, DescriptorResolver: files}))
	addr := serveOn(t, gs)

	s, reg, _ := newServices(t)
	if err := s.Sync(t.Context(), []Config{{Name: "l", Target: addr, Insecure: true}}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the legacy tool", sourcetest.Has("l_Legacy_Create"))
	res := call(t, t.Context(), reg, "l_Legacy_Create", `{"name":"x"}`, nil)
	if res.IsError {
		t.Fatalf("the call the upstream made is an error: %s", text(res))
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(text(res)), &got); err != nil {
		t.Fatalf("%q: %v", text(res), err)
	}
	want := map[string]any{"name": "caf\ufffd", "tags": []any{"ok", "\ufffd"}, "labels": map[string]any{"k\ufffd": "v\ufffd"}, "inner": map[string]any{"name": "deep\ufffd"}}
	if diff := cmp.Diff(want, got); diff != "" || created != 1 {
		t.Errorf("the answer (-want +got), made %d times:\n%s", created, diff)
	}
}
