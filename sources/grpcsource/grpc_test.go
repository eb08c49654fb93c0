package grpcsource

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	rpbalpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// TestMain doubles as the health server of TestHealth's second process.
func TestMain(m *testing.M) {
	if addr := os.Getenv("TW_GRPC_HEALTH_SERVER"); addr != "" {
		serveHealth(addr)
		return
	}
	goleak.VerifyTestMain(m)
}

// serveHealth serves the standard health service and reflection on addr
// ("127.0.0.1:0" picks a port), prints the address, and serves until its
// stdin closes.
func serveHealth(addr string) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	fmt.Println(lis.Addr().String())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	gs.Serve(lis)
}

// startHealthProcess runs the health server in a second process on addr
// and returns its address and a function that kills it.
func startHealthProcess(t *testing.T, addr string) (string, func()) {
	t.Helper()
	addr, kill, _ := startHealthPID(t, addr)
	return addr, kill
}

// startHealthPID is startHealthProcess, also returning the process's ID.
func startHealthPID(t *testing.T, addr string) (string, func(), int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=NONE")
	cmd.Env = append(os.Environ(), "TW_GRPC_HEALTH_SERVER="+addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the health server process: %v", err)
	}
	var once sync.Once
	kill := func() {
		once.Do(func() {
			stdin.Close()
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	t.Cleanup(kill)
	return strings.TrimSpace(line), kill, cmd.Process.Pid
}

func newServices(t *testing.T) (*Services, *tools.Registry, *logbuf.Buffer) {
	t.Helper()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	s := New(reg, slog.New(slog.NewJSONHandler(logs, nil)))
	s.set.MinBackoff, s.set.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	t.Cleanup(func() { s.Close() })
	return s, reg, logs
}

// call runs a tool as the engine does: arguments validated, the handler,
// structured content checked against the output schema.
func call(t *testing.T, ctx context.Context, reg *tools.Registry, name, args string, report func(tools.Progress)) *tools.Result {
	t.Helper()
	tl, ok := reg.Snapshot().Lookup(name)
	if !ok {
		t.Fatalf("no tool %s; tools are %v", name, reg.Snapshot().Names())
	}
	if _, err := tl.ValidateArguments(args); err != nil {
		t.Fatalf("%s(%s): arguments refused: %v", name, args, err)
	}
	res, err := tl.Handler(ctx, tools.NewCall("c", name, json.RawMessage(args), report))
	if err != nil {
		t.Fatalf("%s(%s): %v", name, args, err)
	}
	if len(res.StructuredContent) > 0 && !res.IsError {
		if err := tl.ValidateOutput(res.StructuredContent); err != nil {
			t.Errorf("%s: structured content %s fails the output schema: %v", name, res.StructuredContent, err)
		}
	}
	return res
}

func text(res *tools.Result) string {
	var b strings.Builder
	for _, c := range res.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// TestHealth offers the standard health service of a second process,
// calls Check and the server-streaming Watch, loses the tools when the
// process dies and gets them back when it returns on the same address.
func TestHealth(t *testing.T) {
	t.Parallel()
	addr, kill := startHealthProcess(t, "127.0.0.1:0")
	s, reg, logs := newServices(t)
	cfgs := []Config{{Name: "h", Target: addr, Insecure: true}}
	if err := s.Sync(t.Context(), cfgs); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the health service's tools", sourcetest.Has("h_Health_Check", "h_Health_Watch", "h_Health_List"))

	res := call(t, t.Context(), reg, "h_Health_Check", `{"service":""}`, nil)
	if res.IsError || string(res.StructuredContent) != `{"status":"SERVING"}` {
		t.Errorf("Check: %s / %s", text(res), res.StructuredContent)
	}
	res = call(t, t.Context(), reg, "h_Health_Check", `{"service":"nope"}`, nil)
	if !res.IsError || text(res) != "/grpc.health.v1.Health/Check: gRPC status NotFound: unknown service" || !strings.Contains(string(res.Details), `"code":"NotFound"`) {
		t.Errorf("Check of an unknown service: %s %s", text(res), res.Details)
	}

	// Watch streams until cancelled: its first message arrives as output.
	ctx, cancel := context.WithCancel(t.Context())
	var outputs []string
	var mu sync.Mutex
	_, err := func() (*tools.Result, error) {
		tl, _ := reg.Snapshot().Lookup("h_Health_Watch")
		return tl.Handler(ctx, tools.NewCall("w", "h_Health_Watch", []byte(`{"service":"db"}`), func(p tools.Progress) {
			mu.Lock()
			outputs = append(outputs, p.Output)
			mu.Unlock()
			cancel()
		}))
	}()
	if err != context.Canceled || len(outputs) != 1 || outputs[0] != `{"status":"NOT_SERVING"}`+"\n" {
		t.Errorf("Watch: %v, outputs %q", err, outputs)
	}

	kill()
	sourcetest.WaitTools(t, reg, "the tools to go with the process", func(names []string) bool { return len(names) == 0 })
	startHealthProcess(t, addr)
	sourcetest.WaitTools(t, reg, "the tools to come back", sourcetest.Has("h_Health_Check"))
	if res := call(t, t.Context(), reg, "h_Health_Check", `{}`, nil); res.IsError {
		t.Errorf("Check after the server came back: %s", text(res))
	}
	if !strings.Contains(logs.String(), "gRPC server unavailable; retrying") {
		t.Errorf("no line says the server was unavailable:\n%s", logs)
	}
}

// mappingServer serves testdata/mapping.binpb's Mapping service with
// reflection (v1, or only v1alpha) and records what calls carried.
type mappingServer struct {
	hidden atomic.Bool // reflection lists no service
	files  *protoregistry.Files
	svc    protoreflect.ServiceDescriptor
	mu     sync.Mutex
	seen   []metadata.MD
	dead   []bool // whether each call had a deadline
}

func loadMapping(t testing.TB) *protoregistry.Files {
	b, err := os.ReadFile("testdata/mapping.binpb")
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// GetServiceInfo is what reflection lists: Mapping, unless hidden.
func (ms *mappingServer) GetServiceInfo() map[string]grpc.ServiceInfo {
	if ms.hidden.Load() {
		return nil
	}
	return map[string]grpc.ServiceInfo{"toolwire.test.mapping.Mapping": {}}
}

func startMapping(t *testing.T, alphaOnly bool) (*mappingServer, string) {
	t.Helper()
	files := loadMapping(t)
	d, err := files.FindDescriptorByName("toolwire.test.mapping.Mapping")
	if err != nil {
		t.Fatal(err)
	}
	ms := &mappingServer{files: files, svc: d.(protoreflect.ServiceDescriptor)}
	gs := grpc.NewServer(grpc.UnknownServiceHandler(ms.handle))
	opts := reflection.ServerOptions{Services: ms, DescriptorResolver: files}
	if alphaOnly {
		rpbalpha.RegisterServerReflectionServer(gs, reflection.NewServer(opts))
	} else {
		rpb.RegisterServerReflectionServer(gs, reflection.NewServerV1(opts))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return ms, lis.Addr().String()
}

// handle answers every Mapping method by its name.
func (ms *mappingServer) handle(_ any, stream grpc.ServerStream) error {
	full, _ := grpc.MethodFromServerStream(stream)
	name := full[strings.LastIndex(full, "/")+1:]
	md := ms.svc.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return status.Errorf(codes.Unimplemented, "no method %s", full)
	}
	in := dynamicpb.NewMessage(md.Input())
	if err := stream.RecvMsg(in); err != nil {
		return err
	}
	ctx := stream.Context()
	m, _ := metadata.FromIncomingContext(ctx)
	_, hasDeadline := ctx.Deadline()
	ms.mu.Lock()
	ms.seen, ms.dead = append(ms.seen, m), append(ms.dead, hasDeadline)
	ms.mu.Unlock()
	switch name {
	case "Echo":
		return stream.SendMsg(in)
	case "Put":
		return stream.SendMsg(dynamicpb.NewMessage(md.Output()))
	case "Fail":
		text := in.Get(md.Input().Fields().ByName("text")).String()
		if text == "block" {
			<-ctx.Done()
			return ctx.Err()
		}
		return status.Error(codes.FailedPrecondition, "the thing is "+text)
	case "Count":
		n := in.Get(md.Input().Fields().ByName("count")).Int()
		for i := range n {
			out := dynamicpb.NewMessage(md.Output())
			out.Set(md.Output().Fields().ByName("i64"), protoreflect.ValueOfInt64(i+1))
			if err := stream.SendMsg(out); err != nil {
				return err
			}
		}
		return nil
	}
	return status.Errorf(codes.Unimplemented, "%s", name)
}

// TestMapping derives schemas from a service covering the protobuf JSON
// mapping (served by reflection v1alpha only, so the fallback is used),
// and calls its methods: echo, a status error, a cancelled call, a
// server stream.
func TestMapping(t *testing.T) {
	t.Parallel()
	ms, addr := startMapping(t, true)
	s, reg, logs := newServices(t)
	if err := s.Sync(t.Context(), []Config{{Name: "m", Target: addr, Insecure: true, Exclude: []string{"**/Put"}}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the mapping tools", sourcetest.Has("m_Mapping_Echo", "m_Mapping_Count"))
	if diff := cmp.Diff([]string{"m_Mapping_Count", "m_Mapping_Echo", "m_Mapping_Fail"}, snap.Names()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	for _, skipped := range []string{"Mapping/Collect", "Mapping/Chat", "Mapping/Name"} {
		if !strings.Contains(logs.String(), skipped) {
			t.Errorf("no log line says %s was skipped:\n%s", skipped, logs)
		}
	}

	echo, _ := snap.Lookup("m_Mapping_Echo")
	if !echo.Annotations.ReadOnly || !echo.Annotations.Idempotent || echo.Description != "Echo returns its request." {
		t.Errorf("Echo: %+v %q", echo.Annotations, echo.Description)
	}
	if fail, _ := snap.Lookup("m_Mapping_Fail"); fail.Annotations.ReadOnly || fail.Annotations.Idempotent {
		t.Errorf("Fail: %+v", fail.Annotations)
	}
	var schema struct {
		Properties map[string]map[string]any
		Defs       map[string]map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(echo.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	p := schema.Properties
	// deref is a property's schema, its $ref followed.
	deref := func(s map[string]any) map[string]any {
		if ref, ok := s["$ref"].(string); ok && strings.HasPrefix(ref, "#/$defs/") {
			return schema.Defs[strings.TrimPrefix(ref, "#/$defs/")]
		}
		return s
	}
	for field, want := range map[string]string{
		"i32": "integer", "i64": "string", "u64": "string", "f64": "string", "b": "boolean", "text": "string",
		"data": "string", "color": "string", "tags": "array", "counts": "object", "inner": "object", "when": "string",
		"took": "string", "meta": "object", "big": "string", "maybe": "boolean", "mask": "string", "anyValue": "",
		"thing": "object", "flags": "object", "ids": "object",
	} {
		if got, _ := deref(p[field])["type"].(string); got != want {
			t.Errorf("field %s: type %v; want %q", field, deref(p[field])["type"], want)
		}
	}
	if p["i64"]["description"] != "A 64-bit integer, a decimal string in JSON." || deref(p["i64"])["description"] != "a 64-bit integer, as a decimal string" {
		t.Errorf("i64's description from its comment: %v, of its type %v", p["i64"]["description"], deref(p["i64"])["description"])
	}
	if !cmp.Equal(p["color"]["enum"], []any{"COLOR_UNSPECIFIED", "COLOR_RED", "COLOR_GREEN"}) || deref(p["when"])["format"] != "date-time" {
		t.Errorf("color %v, when %v", p["color"], deref(p["when"]))
	}
	// Everything inside itself: a $ref to the root, with the field's comment.
	if p["child"]["$ref"] != "#" || p["child"]["description"] != "A child of the same type: a $ref to the root." {
		t.Errorf("child: %v", p["child"])
	}
	for _, bad := range []string{`{"left":"a","right":1}`, `{"i64":12.5}`, `{"color":"COLOR_BLUE"}`, `{"took":"5 minutes"}`, `{"nope":1}`} {
		if _, err := echo.ValidateArguments(bad); err == nil {
			t.Errorf("Echo accepts %s", bad)
		}
	}

	args := `{"i32":-3,"i64":"-9007199254740993","u64":"18446744073709551615","s32":-1,"f64":"7","d":1.5,"f":"NaN","b":true,` +
		`"text":"héllo","data":"AAEC","color":"COLOR_RED","tags":["a","b"],"counts":{"x":"1"},"inners":{"5":{"name":"five","more":[{"name":"six"}]}},` +
		`"inner":{"name":"in"},"left":"L","when":"2026-12-02T03:04:05Z","took":"1.5s","meta":{"k":[1,"two",null]},"anyValue":{"a":true},` +
		`"big":"42","maybe":false,"mask":"text,inner.name","child":{"text":"kid","child":{"i32":1}},"note":""}`
	tc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	ctx, cancel := context.WithTimeout(trace.ContextWithSpanContext(t.Context(), tc), time.Minute)
	defer cancel()
	res := call(t, ctx, reg, "m_Mapping_Echo", args, nil)
	want := dynamicpb.NewMessage(ms.svc.Methods().ByName("Echo").Input())
	if err := protojson.Unmarshal([]byte(args), want); err != nil {
		t.Fatal(err)
	}
	got := dynamicpb.NewMessage(want.Descriptor())
	if err := protojson.Unmarshal(res.StructuredContent, got); err != nil || !proto.Equal(got, want) {
		t.Errorf("Echo: %s (%v); want the arguments back", res.StructuredContent, err)
	}
	if !strings.Contains(string(res.StructuredContent), `"i64":"-9007199254740993"`) || !strings.Contains(string(res.StructuredContent), `"color":"COLOR_RED"`) {
		t.Errorf("Echo's JSON: %s", res.StructuredContent)
	}
	ms.mu.Lock()
	tp, dl := ms.seen[len(ms.seen)-1].Get("traceparent"), ms.dead[len(ms.dead)-1]
	ms.mu.Unlock()
	if len(tp) != 1 || !strings.HasPrefix(tp[0], "00-01020300000000000000000000000000-0405000000000000-01") || !dl {
		t.Errorf("the server saw traceparent %v, a deadline %v", tp, dl)
	}

	// What the schema lets through and protojson refuses is the
	// arguments' fault all the same: INVALID_ARGUMENTS, naming the field.
	// (A member named twice no longer gets this far: the validator
	// refuses it, tools' TestRepeatedArgumentsRefused.)
	for _, args := range []string{`{"data":"A"}`, `{"thing":{"@type":"type.googleapis.com/no.Such"}}`} {
		res := call(t, t.Context(), reg, "m_Mapping_Echo", args, nil)
		if !res.IsError || res.ErrorKind != int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS) || !strings.HasPrefix(text(res), "the arguments are not a toolwire.test.mapping.Everything: ") {
			t.Errorf("Echo(%s): %d %s", args, res.ErrorKind, text(res))
		}
	}
	// An Any of a type the server describes goes there and back.
	res = call(t, t.Context(), reg, "m_Mapping_Echo", `{"thing":{"@type":"type.googleapis.com/toolwire.test.mapping.Inner","name":"x"}}`, nil)
	if res.IsError || string(res.StructuredContent) != `{"thing":{"@type":"type.googleapis.com/toolwire.test.mapping.Inner","name":"x"}}` {
		t.Errorf("Echo of an Any: %s", text(res))
	}

	res = call(t, t.Context(), reg, "m_Mapping_Fail", `{"text":"broken"}`, nil)
	if !res.IsError || text(res) != "/toolwire.test.mapping.Mapping/Fail: gRPC status FailedPrecondition: the thing is broken" {
		t.Errorf("Fail: %s", text(res))
	}
	bctx, bcancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		tl, _ := snap.Lookup("m_Mapping_Fail")
		_, err := tl.Handler(bctx, tools.NewCall("b", "m_Mapping_Fail", []byte(`{"text":"block"}`), nil))
		done <- err
	}()
	for n := 0; ; n++ {
		ms.mu.Lock()
		arrived := len(ms.seen) >= 3
		ms.mu.Unlock()
		if arrived {
			break
		}
		time.Sleep(2 * time.Millisecond)
		if n > 15000 {
			t.Fatal("the blocking call never arrived")
		}
	}
	bcancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("a cancelled call: %v", err)
	}

	var outs []string
	res = call(t, t.Context(), reg, "m_Mapping_Count", `{"count":3}`, func(p tools.Progress) { outs = append(outs, p.Output) })
	if res.IsError || string(res.StructuredContent) != `{"messages":[{"i64":"1"},{"i64":"2"},{"i64":"3"}]}` || text(res) != string(res.StructuredContent) ||
		!cmp.Equal(outs, []string{`{"i64":"1"}` + "\n", `{"i64":"2"}` + "\n", `{"i64":"3"}` + "\n"}) {
		t.Errorf("Count: %s, outputs %q", res.StructuredContent, outs)
	}
	if res := call(t, t.Context(), reg, "m_Mapping_Count", `{}`, nil); res.IsError || text(res) != `{"messages":[]}` {
		t.Errorf("Count of 0: %s", text(res))
	}

	// A reload re-resolves: Put, excluded before, comes in.
	if err := s.Sync(t.Context(), []Config{{Name: "m", Target: addr, Insecure: true}}); err != nil {
		t.Fatal(err)
	}
	snap = sourcetest.WaitTools(t, reg, "Put after the reload", sourcetest.Has("m_Mapping_Put"))
	if put, _ := snap.Lookup("m_Mapping_Put"); put.Annotations.ReadOnly || !put.Annotations.Idempotent {
		t.Errorf("Put: %+v", put.Annotations)
	}
	if res := call(t, t.Context(), reg, "m_Mapping_Put", `{}`, nil); res.IsError || string(res.StructuredContent) != `{}` {
		t.Errorf("Put: %s", text(res))
	}
	// A reload with the same config re-resolves too: a service gone from
	// the server takes its tools with it.
	ms.hidden.Store(true)
	if err := s.Sync(t.Context(), []Config{{Name: "m", Target: addr, Insecure: true}}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the tools of the service gone", func(n []string) bool { return len(n) == 0 })
	ms.hidden.Store(false)
	if err := s.Sync(t.Context(), []Config{{Name: "m", Target: addr, Insecure: true}}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the tools of the service back", sourcetest.Has("m_Mapping_Echo"))
	if err := s.Sync(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the tools to go", func(n []string) bool { return len(n) == 0 })
}

// TestToolService mounts toolwire's own ToolService by reflection alone
// and calls a tool through its CallTool.
func TestToolService(t *testing.T) {
	t.Parallel()
	inner, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	srv := loopback.Serve(t, inner, grpcserve.Config{})
	s, reg, _ := newServices(t)
	if err := s.Sync(t.Context(), []Config{{Name: "tw", Target: srv.Addr, Insecure: true, Include: []string{"toolwire.v1.ToolService/*"}}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the ToolService's tools", sourcetest.Has("tw_ToolService_CallTool", "tw_ToolService_ListTools", "tw_ToolService_ExecuteBatch"))
	if slices.Contains(snap.Names(), "tw_Health_Check") {
		t.Errorf("include did not apply: %v", snap.Names())
	}
	res := call(t, t.Context(), reg, "tw_ToolService_CallTool", `{"call":{"callId":"c1","name":"echo","arguments":"{\"text\":\"hi there\"}"}}`, nil)
	if res.IsError || !strings.Contains(string(res.StructuredContent), `"callId":"c1"`) || !strings.Contains(string(res.StructuredContent), `hi there`) {
		t.Errorf("CallTool: %s", text(res))
	}
	var outs []string
	res = call(t, t.Context(), reg, "tw_ToolService_ExecuteBatch", `{"calls":[{"callId":"a","name":"echo","arguments":"{\"text\":\"one\"}"}]}`, func(p tools.Progress) { outs = append(outs, p.Output) })
	if res.IsError || !strings.Contains(string(res.StructuredContent), `"finished"`) || len(outs) < 3 || !strings.Contains(strings.Join(outs, ""), `"text":"one"`) {
		t.Errorf("ExecuteBatch: %s; events %q", res.StructuredContent, outs)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "a-b", Target: "h:1"}, "name must match"},
		{Config{Name: "a"}, "target is required"},
		{Config{Name: "a", Target: "h:1", Insecure: true, CAFile: "ca.pem"}, "conflicts"},
		{Config{Name: "a", Target: "tools.example:443", Insecure: true, Token: "{{T}}"}, "plaintext only to a loopback target"},
		{Config{Name: "a", Target: "h:1", Include: []string{"a/[b"}}, "not a valid glob"},
		{Config{Name: "a", Target: "h:1", StreamWindow: -time.Second}, "stream_window -1s: want 0"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if err := ValidateAll([]Config{{Name: "a", Target: "x:1"}, {Name: "a", Target: "y:1"}}); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Errorf("duplicate names: %v", err)
	}
}

// TestFrozenServer: a server that stops answering (its process stopped
// with SIGSTOP: the kernel keeps its connections open) does not hold a
// call until the call's deadline: the connection, silent past the
// keepalive's time while the call is on it, is pinged, and closed when
// no answer comes, failing the call; once the server goes on, its tools
// serve again.
func TestFrozenServer(t *testing.T) {
	t.Parallel()
	addr, _, pid := startHealthPID(t, "127.0.0.1:0")
	s, reg, _ := newServices(t)
	s.keepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 500 * time.Millisecond} // gRPC's least Time
	if err := s.Sync(t.Context(), []Config{{Name: "h", Target: addr, Insecure: true}}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the health service's tools", sourcetest.Has("h_Health_Watch"))

	// Watch streams its first message, then waits: a call on the
	// connection, nothing on the wire.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	first := make(chan struct{}, 1)
	done := make(chan *tools.Result, 1)
	go func() {
		tl, _ := reg.Snapshot().Lookup("h_Health_Watch")
		res, err := tl.Handler(ctx, tools.NewCall("w", "h_Health_Watch", []byte(`{"service":"db"}`), func(tools.Progress) {
			select {
			case first <- struct{}{}:
			default:
			}
		}))
		if err != nil {
			res = &tools.Result{IsError: true, Content: []tools.Content{{Text: "handler error: " + err.Error()}}}
		}
		done <- res
	}()
	select {
	case <-first:
	case <-time.After(time.Minute):
		t.Fatal("Watch sent nothing")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	select {
	case res := <-done:
		if !res.IsError || !strings.Contains(text(res), "Unavailable") {
			t.Errorf("the call on the frozen server: %q; want Unavailable", text(res))
		}
	case <-time.After(time.Minute): // the keepalive's 10.5 s, with room; its deadline is 10m
		t.Fatal("the call on the frozen server waits for its deadline")
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("h_Health_Check"))
	deadline := time.Now().Add(time.Minute)
	for {
		res := call(t, t.Context(), reg, "h_Health_Check", `{}`, nil)
		if !res.IsError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Check after the server went on: %s", text(res))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
