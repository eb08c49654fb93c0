package grpcsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/toolname"
	"github.com/toolwire/toolwire/tools"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// connHolder gives a method's calls the connection of the moment, and
// end, which the call must call when it has returned; nil while there is
// none. The connection stays open until end.
type connHolder interface {
	conn() (cc grpc.ClientConnInterface, end func())
}

// method runs the calls of one method's tool.
type method struct {
	name       string // the tool's
	full       string // "/package.Service/Method"
	in, out    protoreflect.MessageDescriptor
	streaming  bool // server streaming
	structured bool // the tool declares an output schema
	idempotent bool // its proto says NO_SIDE_EFFECTS or IDEMPOTENT
	types      resolver
	holder     connHolder
}

// maxStreamBytes bounds the JSON of the messages one server-streaming call
// keeps for its result; past it the stream is cancelled and the result
// says the list is incomplete.
const maxStreamBytes = 1 << 20

// methodTools makes the tools of svcs' methods that c selects: unary and
// server-streaming ones; client and bidirectional streaming ones are left
// out with a log line, as are those whose request is not a JSON object.
// A pattern of c's that matches no method is logged.
//
// The tools are held to bounds (listing.Default) as an MCP server's
// listing is: a schema is bounded, but every method taking one large
// message repeats it, so 154 KB of descriptors (one message of 7000
// fields, ten methods) made 4.3 MB of declarations, and a few hundred
// methods of a message with a long comment, gigabytes. Past a bound the
// methods are cut with an error logged and the tools before the cut
// offered. Each distinct schema text is compiled once (schemas), output
// schemas when first used, as an OpenAPI document's are.
func methodTools(c Config, svcs []protoreflect.ServiceDescriptor, types resolver, holder connHolder, bounds listing.Bounds, log *slog.Logger) []tools.Tool {
	taken := map[string]bool{}
	sel := c.selector()
	l := listing.Listing{Max: bounds}
	schemas := &tools.SchemaCache{DeferOutput: true}
	var out []tools.Tool
	var names []string
	for _, sd := range svcs {
		names = append(names, string(sd.FullName()))
		ms := sd.Methods()
		for i := range ms.Len() {
			md := ms.Get(i)
			full := string(sd.FullName()) + "/" + string(md.Name())
			if !sel.selects(sd.FullName(), full) {
				continue
			}
			if md.IsStreamingClient() {
				log.Info("skipping gRPC method: client and bidirectional streaming are not offered", "method", full)
				continue
			}
			if l.Cut != nil || !l.Tool() {
				break
			}
			t, err := methodTool(c, sd, md, types, holder, taken, schemas)
			if err != nil {
				log.Warn("skipping gRPC method", "method", full, "error", err)
				continue
			}
			if taken[t.Name] {
				// toolname.Make's hashed name is taken too: a service
				// listed twice, or two long names whose hashes collide. A
				// name twice would fail the update of all the tools.
				log.Warn("skipping gRPC method: its tool's name is taken by another method's", "method", full, "tool", t.Name)
				continue
			}
			if !l.Keep(t) {
				break
			}
			taken[t.Name] = true
			out = append(out, t)
		}
		if l.Cut != nil {
			break
		}
	}
	if l.Cut != nil {
		log.Error("gRPC server's methods cut short; offering the tools made before the cut", "error", l.Cut, "tools", len(out))
	}
	sel.logUnmatched(log, names)
	return out
}

func methodTool(c Config, sd protoreflect.ServiceDescriptor, md protoreflect.MethodDescriptor, types resolver, holder connHolder, taken map[string]bool, schemas *tools.SchemaCache) (tools.Tool, error) {
	full := string(sd.FullName()) + "/" + string(md.Name())
	in := inputSchema(md.Input())
	if in["type"] != "object" {
		return tools.Tool{}, fmt.Errorf("its request, %s, is not a JSON object in the protobuf JSON mapping", md.Input().FullName())
	}
	inJSON, err := json.Marshal(in)
	if err != nil {
		return tools.Tool{}, err
	}
	m := &method{full: "/" + full, in: md.Input(), out: md.Output(), streaming: md.IsStreamingServer(), types: types, holder: holder}
	out := outputSchema(md.Output())
	if m.streaming {
		out = newSchemaGen(true).streamDocument(md.Output())
	}
	var outJSON json.RawMessage
	if out["type"] == "object" {
		if outJSON, err = json.Marshal(out); err != nil {
			return tools.Tool{}, err
		}
		m.structured = true
	}
	desc := comments(md)
	if desc == "" {
		desc = "Calls " + full + " (gRPC)."
	}
	var timeout time.Duration
	if m.streaming {
		desc += "\n\nServer streaming: the result lists the response messages in order, once the stream ends; " +
			"a stream still open when the call's deadline comes gives the messages that arrived by then."
		timeout = c.StreamWindow
	}
	var level descriptorpb.MethodOptions_IdempotencyLevel
	if opts, ok := md.Options().(*descriptorpb.MethodOptions); ok && opts != nil {
		level = opts.GetIdempotencyLevel()
	}
	m.idempotent = level == descriptorpb.MethodOptions_NO_SIDE_EFFECTS || level == descriptorpb.MethodOptions_IDEMPOTENT
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
		Timeout: timeout,
		Source:  tools.SourceRemote,
		Handler: m.call,
	}
	return schemas.Compile(t)
}

// callDetails are a result's details: the method and, for an error, the
// status.
type callDetails struct {
	Method   string `json:"method"`
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
	Messages int    `json:"messages,omitempty"` // received, when streaming
}

// streamResult is a server-streaming call's structured result.
type streamResult struct {
	Messages   []json.RawMessage `json:"messages"`
	Incomplete string            `json:"incomplete,omitempty"`
}

func (m *method) call(ctx context.Context, call *tools.Call) (*tools.Result, error) {
	conn, end := m.holder.conn()
	if conn == nil {
		return tools.Errorf("%s: the server is not connected; its tools come back when it reconnects", m.full), nil
	}
	defer end()
	req := dynamicpb.NewMessage(m.in)
	if args := bytes.TrimSpace(call.Arguments); len(args) > 0 {
		if err := (protojson.UnmarshalOptions{Resolver: m.types}).Unmarshal(args, req); err != nil {
			// What the schema cannot say (an Any of a type the server
			// does not describe, a key given twice) is still the
			// arguments' fault, not the server's.
			res := tools.Errorf("the arguments are not a %s: %v", m.in.FullName(), err)
			res.ErrorKind = int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS)
			return res, nil
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
		if err := conn.Invoke(ctx, m.full, req, resp, grpc.ForceCodecV2(newAnswerCodec())); err != nil {
			return m.failed(ctx, err, det)
		}
		js, err := m.marshal(resp)
		if err != nil {
			return nil, err
		}
		return m.result(js, det), nil
	}
	return m.stream(ctx, conn, req, call, det)
}

// stream runs a server-streaming call: each message is reported as
// progress output as it arrives, and the result lists them all once the
// stream ends. When the call's deadline comes first (a stream that never
// ends, such as grpc.health.v1.Health/Watch), the result is the messages
// that arrived by then, if any; past maxStreamBytes of them the stream is
// cancelled and the result is those kept.
func (m *method) stream(ctx context.Context, conn grpc.ClientConnInterface, req *dynamicpb.Message, call *tools.Call, det callDetails) (*tools.Result, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := conn.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true}, m.full, grpc.ForceCodecV2(newAnswerCodec()))
	if err != nil {
		return m.failed(ctx, err, det)
	}
	if err := stream.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return m.failed(ctx, err, det)
	}
	if err := stream.CloseSend(); err != nil {
		return m.failed(ctx, err, det)
	}
	res := streamResult{Messages: []json.RawMessage{}}
	size := 0
	for {
		msg := dynamicpb.NewMessage(m.out)
		err := stream.RecvMsg(msg)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// Only the deadline, not a cancellation (the client's, or
			// the batch's), turns what arrived into the result.
			if len(res.Messages) > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				res.Incomplete = fmt.Sprintf("the call's deadline came while the stream was still open; these are the %d messages that arrived", len(res.Messages))
				break
			}
			return m.failed(ctx, err, det)
		}
		det.Messages++
		js, err := m.marshal(msg)
		if err != nil {
			return nil, err
		}
		call.Output(string(js) + "\n")
		if size += len(js) + 1; size > maxStreamBytes {
			res.Incomplete = fmt.Sprintf("the stream sent more than %d bytes of JSON: it was cancelled, and these are the %d messages before that", maxStreamBytes, len(res.Messages))
			break
		}
		res.Messages = append(res.Messages, js)
	}
	js, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return m.result(js, det), nil
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
	res := tools.Errorf("%s: gRPC status %s: %s%s", m.full, st.Code(), st.Message(), m.mayHaveRun(st.Code()))
	res.Details, _ = json.Marshal(det)
	return res, nil
}

// mayHaveRun is what an error result adds when the status leaves open
// whether the server ran the call: a connection that broke after the
// request was sent is UNAVAILABLE (or INTERNAL, for a stream reset),
// which gRPC clients retry, and a server that failed midway says UNKNOWN
// or INTERNAL. A model told only the status would send a call that
// changes something again, and it could run twice; a method whose proto
// says it has no side effects, or is idempotent, is safe to send again.
func (m *method) mayHaveRun(code codes.Code) string {
	if m.idempotent {
		return ""
	}
	switch code {
	case codes.Unavailable, codes.Unknown, codes.Internal, codes.DataLoss:
		return " (the server may have received the call, and run it, before this: check before calling it again)"
	}
	return ""
}

// mendStrings replaces what is not UTF-8 in msg's strings, its nested
// messages', lists' and maps' (keys too) with U+FFFD, and reports whether
// it changed any.
func mendStrings(msg protoreflect.Message) bool {
	mend := func(v protoreflect.Value) (protoreflect.Value, bool) {
		s := v.String()
		if utf8.ValidString(s) {
			return v, false
		}
		return protoreflect.ValueOfString(strings.ToValidUTF8(s, "\uFFFD")), true
	}
	changed := false
	type set struct {
		fd protoreflect.FieldDescriptor
		v  protoreflect.Value
	}
	var sets []set // after Range: a message is not to be changed during it
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if fd.Kind() == protoreflect.StringKind {
					if nv, ok := mend(l.Get(i)); ok {
						l.Set(i, nv)
						changed = true
					}
				} else if fd.Message() != nil {
					changed = mendStrings(l.Get(i).Message()) || changed
				}
			}
		case fd.IsMap():
			mp := v.Map()
			type entry struct {
				old, key protoreflect.MapKey
				v        protoreflect.Value
			}
			var mended []entry // after Range, as for the message
			mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				nk, kok := k.Value(), false
				if fd.MapKey().Kind() == protoreflect.StringKind {
					nk, kok = mend(nk)
				}
				nv, vok := v, false
				if fd.MapValue().Kind() == protoreflect.StringKind {
					nv, vok = mend(v)
				} else if fd.MapValue().Message() != nil {
					changed = mendStrings(v.Message()) || changed
				}
				if kok || vok {
					mended = append(mended, entry{k, nk.MapKey(), nv})
				}
				return true
			})
			for _, e := range mended {
				mp.Clear(e.old)
				mp.Set(e.key, e.v)
				changed = true
			}
		case fd.Kind() == protoreflect.StringKind:
			if nv, ok := mend(v); ok {
				sets = append(sets, set{fd, nv})
			}
		case fd.Message() != nil:
			changed = mendStrings(v.Message()) || changed
		}
		return true
	})
	for _, s := range sets {
		msg.Set(s.fd, s.v)
	}
	return changed || len(sets) > 0
}

// result is a successful result of JSON text js.
func (m *method) result(js []byte, det callDetails) *tools.Result {
	res := tools.Text(string(js))
	if m.structured {
		res.StructuredContent = js
	}
	res.Details, _ = json.Marshal(det)
	return res
}

// marshal is msg's protojson, compacted: protojson varies its spacing.
//
// A proto2 upstream's strings are not checked for UTF-8 on the wire, and
// protojson refuses one that is not: the call succeeded, so rather than
// report it as failed (inviting the model to make it again), those strings
// are mended (U+FFFD) and the answer shown.
func (m *method) marshal(msg *dynamicpb.Message) ([]byte, error) {
	opts := protojson.MarshalOptions{Resolver: m.types}
	js, err := opts.Marshal(msg)
	if err != nil && mendStrings(msg) {
		js, err = opts.Marshal(msg)
	}
	if err != nil {
		return nil, fmt.Errorf("encoding the response as JSON: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, js); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
