package grpcserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends the bytes it is given as the message, as a client with a
// broken protobuf library would, and reads replies as protobuf.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// TestUndecodableRequestIsRefusedBeforeAnything sends requests that are not
// valid protobuf. They are refused before the batch is accepted, with a
// status naming the problem, and the connection goes on serving. The code
// is INTERNAL, not INVALID_ARGUMENT: grpc-go turns any error from the codec,
// a status included, into INTERNAL (rpc_util.go, recv), and serverStream's
// RecvMsg writes that status to the client itself before the handler or an
// interceptor could return another one. If grpc-go changes that, this test
// fails and the server can say INVALID_ARGUMENT.
func TestUndecodableRequestIsRefusedBeforeAnything(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	good, err := proto.Marshal(batchOf(call("a", "echo", `{"text":"ok"}`)))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		bytes []byte
		want  string // in the status message; "" for a valid request
	}{
		// calls[0].call_id = "\xff": field 1 (calls), 3 bytes holding field 1 (call_id), 1 byte.
		{"call_id not UTF-8", []byte("\x0a\x03\x0a\x01\xff"), "invalid UTF-8"},
		{"name not UTF-8", []byte("\x0a\x06\x0a\x01a\x12\x01\xfe"), "invalid UTF-8"},
		{"truncated", good[:len(good)-3], "invalid wire-format"},
		{"valid", good, ""},
	}
	desc := &grpc.StreamDesc{ServerStreams: true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stream, err := conn.NewStream(context.Background(), desc, toolwirev1.ToolService_ExecuteBatch_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.SendMsg(tt.bytes); err != nil {
				t.Fatal(err)
			}
			if err := stream.CloseSend(); err != nil {
				t.Fatal(err)
			}
			var events []string
			for {
				ev := &toolwirev1.ExecuteBatchResponse{}
				if err = stream.RecvMsg(ev); err != nil {
					break
				}
				events = append(events, fmt.Sprintf("%T", ev.GetEvent()))
			}
			if tt.want == "" {
				if !errors.Is(err, io.EOF) || len(events) != 4 {
					t.Errorf("valid request: %v after %v", err, events)
				}
				return
			}
			if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), tt.want) || len(events) != 0 {
				t.Errorf("err = %v after %v; want INTERNAL saying %q before any event", err, events, tt.want)
			}
		})
	}
}
