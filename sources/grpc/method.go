package grpcsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/toolwire/toolwire/sources/internal/toolname"
	"github.com/toolwire/toolwire/tools"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// connHolder gives a method's calls the connection of the moment; nil
// while there is none.
type connHolder interface {
	conn() grpc.ClientConnInterface
}

// method runs the calls of one method's tool.
type method struct {
	name       string // the tool's
	full       string // "/package.Service/Method"
	in, out    protoreflect.MessageDescriptor
	streaming  bool // server streaming
	structured bool // the tool declares an output schema
	holder     connHolder
}

// methodTools makes the tools of svcs' methods that c selects: unary and
// server-streaming ones; client and bidirectional streaming ones are left
// out with a log line, as are those whose request is not a JSON object.
func methodTools(c Config, svcs []protoreflect.ServiceDescriptor, holder connHolder, log *slog.Logger) []tools.Tool {
	taken := map[string]bool{}
	var out []tools.Tool
	for _, sd := range svcs {
		ms := sd.Methods()
		for i := range ms.Len() {
			md := ms.Get(i)
			full := string(sd.FullName()) + "/" + string(md.Name())
			if !c.selects(full) {
				continue
			}
			if md.IsStreamingClient() {
				log.Info("skipping gRPC method: client and bidirectional streaming are not offered", "method", full)
				continue
			}
			t, err := methodTool(c, sd, md, holder, taken)
			if err != nil {
				log.Warn("skipping gRPC method", "method", full, "error", err)
				continue
			}
			taken[t.Name] = true
			out = append(out, t)
		}
	}
	return out
}

func methodTool(c Config, sd protoreflect.ServiceDescriptor, md protoreflect.MethodDescriptor, holder connHolder, taken map[string]bool) (tools.Tool, error) {
	full := string(sd.FullName()) + "/" + string(md.Name())
	in := newSchemaGen(false).message(md.Input(), 0)
	if in["type"] != "object" {
		return tools.Tool{}, fmt.Errorf("its request, %s, is not a JSON object in the protobuf JSON mapping", md.Input().FullName())
	}
	inJSON, err := json.Marshal(in)
	if err != nil {
		return tools.Tool{}, err
	}
	m := &method{full: "/" + full, in: md.Input(), out: md.Output(), streaming: md.IsStreamingServer(), holder: holder}
	var outJSON json.RawMessage
	if o := newSchemaGen(true).message(md.Output(), 0); o["type"] == "object" {
		if outJSON, err = json.Marshal(o); err != nil {
			return tools.Tool{}, err
		}
		m.structured = true
	}
	desc := comments(md)
	if desc == "" {
		desc = "Calls " + full + " (gRPC)."
	}
	if m.streaming {
		desc += "\n\nServer streaming: each response message is reported as progress output; the last is the result."
	}
	var level descriptorpb.MethodOptions_IdempotencyLevel
	if opts, ok := md.Options().(*descriptorpb.MethodOptions); ok && opts != nil {
		level = opts.GetIdempotencyLevel()
	}
	m.name = toolname.Make(c.Name, string(sd.Name())+"_"+string(md.Name()), full, taken)
	t := tools.Tool{
		Name:         m.name,
		Description:  desc,
		InputSchema:  inJSON,
		OutputSchema: outJSON,
		Annotations: tools.Annotations{
			ReadOnly:   level == descriptorpb.MethodOptions_NO_SIDE_EFFECTS,
			Idempotent: level == descriptorpb.MethodOptions_NO_SIDE_EFFECTS || level == descriptorpb.MethodOptions_IDEMPOTENT,
			OpenWorld:  true,
		},
		Source:  tools.SourceRemote,
		Handler: m.call,
	}
	if _, err := tools.NewRegistry(t); err != nil {
		return tools.Tool{}, err
	}
	return t, nil
}

// callDetails are a result's details: the method and, for an error, the
// status.
type callDetails struct {
	Method   string `json:"method"`
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
	Messages int    `json:"messages,omitempty"` // received, when streaming
}

func (m *method) call(ctx context.Context, call *tools.Call) (*tools.Result, error) {
	conn := m.holder.conn()
	if conn == nil {
		return tools.Errorf("%s: the server is not connected; its tools come back when it reconnects", m.full), nil
	}
	req := dynamicpb.NewMessage(m.in)
	if args := bytes.TrimSpace(call.Arguments); len(args) > 0 {
		if err := protojson.Unmarshal(args, req); err != nil {
			return tools.Errorf("the arguments are not a %s: %v", m.in.FullName(), err), nil
		}
	}
	// The caller's trace continues in the server: traceparent (and
	// tracestate) from the call's span, whether or not telemetry exports.
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	for k, v := range carrier {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	det := callDetails{Method: m.full}
	if !m.streaming {
		resp := dynamicpb.NewMessage(m.out)
		if err := conn.Invoke(ctx, m.full, req, resp); err != nil {
			return m.failed(ctx, err, det)
		}
		return m.result(resp, det)
	}
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, m.full)
	if err != nil {
		return m.failed(ctx, err, det)
	}
	if err := stream.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return m.failed(ctx, err, det)
	}
	if err := stream.CloseSend(); err != nil {
		return m.failed(ctx, err, det)
	}
	var last *dynamicpb.Message
	for {
		msg := dynamicpb.NewMessage(m.out)
		err := stream.RecvMsg(msg)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m.failed(ctx, err, det)
		}
		det.Messages++
		js, err := marshal(msg)
		if err != nil {
			return nil, err
		}
		call.Output(string(js) + "\n")
		last = msg
	}
	if last == nil {
		res := tools.Text("the stream ended without a message")
		res.Details, _ = json.Marshal(det)
		return res, nil
	}
	return m.result(last, det)
}

// failed is the result of an RPC that failed: the context's error when the
// call was cancelled or timed out (the engine reports those), else an
// error result with the status.
func (m *method) failed(ctx context.Context, err error, det callDetails) (*tools.Result, error) {
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	st := status.Convert(err)
	det.Code, det.Message = st.Code().String(), st.Message()
	res := tools.Errorf("%s: gRPC status %s: %s", m.full, st.Code(), st.Message())
	res.Details, _ = json.Marshal(det)
	return res, nil
}

func (m *method) result(msg *dynamicpb.Message, det callDetails) (*tools.Result, error) {
	js, err := marshal(msg)
	if err != nil {
		return nil, err
	}
	res := tools.Text(string(js))
	if m.structured {
		res.StructuredContent = js
	}
	res.Details, _ = json.Marshal(det)
	return res, nil
}

// marshal is msg's protojson, compacted: protojson varies its spacing.
func marshal(msg *dynamicpb.Message) ([]byte, error) {
	js, err := protojson.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encoding the response as JSON: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, js); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
