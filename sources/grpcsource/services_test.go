package grpcsource

import (
	"context"
	"net"
	"testing"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types/ref"
	confpb "google.golang.org/genproto/googleapis/api/expr/conformance/v1alpha1"
	exprpb "google.golang.org/genproto/googleapis/api/expr/v1alpha1"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// startServices serves, with reflection, three real services on one
// loopback port: Google's CEL conformance service
// (google.api.expr.conformance.v1alpha1.ConformanceService, whose Expr
// messages nest without end), answered by cel-go; the standard health
// service, whose Watch never ends; and grpc-go's interop TestService
// (grpc.testing.TestService), answered as grpc-go's interop server
// answers. It returns the address and the health server.
func startServices(t *testing.T) (string, *health.Server) {
	t.Helper()
	gs := grpc.NewServer()
	confpb.RegisterConformanceServiceServer(gs, celServer{})
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	testgrpc.RegisterTestServiceServer(gs, interopServer{})
	reflection.Register(gs)
	return serveOn(t, gs), hs
}

// serveOn serves gs on a loopback port until the test ends, and returns
// its address.
func serveOn(t *testing.T, gs *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// celServer is a CEL conformance server over cel-go: Parse, Check (in
// the environment the request declares) and Eval (of a parsed or checked
// expression, with bindings).
type celServer struct {
	confpb.UnimplementedConformanceServiceServer
}

func issues(iss *cel.Issues) []*rpcstatus.Status {
	if iss == nil || iss.Err() == nil {
		return nil
	}
	return []*rpcstatus.Status{{Code: int32(codes.InvalidArgument), Message: iss.Err().Error()}}
}

func (celServer) Parse(_ context.Context, req *confpb.ParseRequest) (*confpb.ParseResponse, error) {
	env, err := cel.NewEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Parse(req.GetCelSource())
	if iss.Err() != nil {
		return &confpb.ParseResponse{Issues: issues(iss)}, nil
	}
	pe, err := cel.AstToParsedExpr(ast)
	if err != nil {
		return nil, err
	}
	return &confpb.ParseResponse{ParsedExpr: pe}, nil
}

func (celServer) Check(_ context.Context, req *confpb.CheckRequest) (*confpb.CheckResponse, error) {
	env, err := cel.NewEnv(cel.Container(req.GetContainer()), cel.Declarations(req.GetTypeEnv()...))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	checked, iss := env.Check(cel.ParsedExprToAst(req.GetParsedExpr()))
	if iss.Err() != nil {
		return &confpb.CheckResponse{Issues: issues(iss)}, nil
	}
	ce, err := cel.AstToCheckedExpr(checked)
	if err != nil {
		return nil, err
	}
	return &confpb.CheckResponse{CheckedExpr: ce}, nil
}

func (celServer) Eval(_ context.Context, req *confpb.EvalRequest) (*confpb.EvalResponse, error) {
	env, err := cel.NewEnv(cel.Container(req.GetContainer()))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var ast *cel.Ast
	switch {
	case req.GetCheckedExpr() != nil:
		ast = cel.CheckedExprToAst(req.GetCheckedExpr())
	case req.GetParsedExpr() != nil:
		ast = cel.ParsedExprToAst(req.GetParsedExpr())
	default:
		return nil, status.Error(codes.InvalidArgument, "no expression to evaluate")
	}
	vars := map[string]any{}
	for name, v := range req.GetBindings() {
		val, err := cel.ValueToRefValue(env.CELTypeAdapter(), v.GetValue())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "binding %s: %v", name, err)
		}
		vars[name] = val
	}
	prg, err := env.Program(ast)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	out, _, err := prg.Eval(vars)
	if err != nil {
		return &confpb.EvalResponse{Result: &exprpb.ExprValue{Kind: &exprpb.ExprValue_Error{Error: &exprpb.ErrorSet{
			Errors: []*rpcstatus.Status{{Code: int32(codes.InvalidArgument), Message: err.Error()}}}}}}, nil
	}
	ev, err := cel.RefValToExprValue(out.(ref.Val))
	if err != nil {
		return nil, err
	}
	return &confpb.EvalResponse{Result: ev}, nil
}

// interopServer answers grpc.testing.TestService's unary and
// server-streaming calls as grpc-go's interop test server does
// (google.golang.org/grpc/interop's, which links more than this test
// needs): payloads of the sizes asked for, the status asked for; a
// stream's intervals are not waited.
type interopServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (interopServer) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return new(testgrpc.Empty), nil
}

func payload(t testgrpc.PayloadType, size int32) (*testgrpc.Payload, error) {
	if size < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "requested a response with invalid length %d", size)
	}
	if t != testgrpc.PayloadType_COMPRESSABLE {
		return nil, status.Errorf(codes.InvalidArgument, "unsupported payload type: %d", t)
	}
	return &testgrpc.Payload{Type: t, Body: make([]byte, size)}, nil
}

func (interopServer) UnaryCall(_ context.Context, in *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if st := in.GetResponseStatus(); st != nil && st.Code != 0 {
		return nil, status.Error(codes.Code(st.Code), st.Message)
	}
	pl, err := payload(in.GetResponseType(), in.GetResponseSize())
	if err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{Payload: pl}, nil
}

func (interopServer) StreamingOutputCall(in *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	for _, p := range in.GetResponseParameters() {
		pl, err := payload(in.GetResponseType(), p.GetSize())
		if err != nil {
			return err
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: pl}); err != nil {
			return err
		}
	}
	return nil
}
