package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc/status"
)

// startExampleServer starts a server with the diagnostic tools on a loopback
// port, standing in for a toolwire deployment, and returns its address and a
// function that stops it.
func startExampleServer() (addr string, stop func()) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	return lis.Addr().String(), func() { cancel(); <-served; eng.Close() }
}

// An agent runtime lists the tools for its model, sends the model's tool
// calls as one batch and reads the results in the order the model made the
// calls. Failures are results the model reads, not errors.
func Example() {
	addr, stop := startExampleServer()
	defer stop()

	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	list, err := c.ListTools(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range list.GetTools() {
		fmt.Printf("%s: %s\n", t.GetName(), t.GetDescription())
	}

	// One model turn's tool calls.
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("call_1", "echo", diag.EchoArgs{Text: "hello"}),
		client.Call("call_2", "echo", `{"text":"world"}`),
		client.Call("call_3", "fail", map[string]string{"message": "disk full"}),
		client.Call("call_4", "lookup", nil),
	}}
	batch, err := client.CollectFor(req, c.ExecuteBatch(ctx, req))
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range batch.Results {
		fmt.Printf("%s %s is_error=%v: %s\n", r.GetCallId(), r.GetToolName(), r.GetIsError(), client.Text(r))
	}
	fmt.Printf("succeeded %d, failed %d\n", batch.Finished.GetSucceeded(), batch.Finished.GetFailed())
	// Output:
	// echo: Returns the given text unchanged.
	// fail: Fails with the given message; for testing error handling.
	// sleep: Waits for the given number of milliseconds, reporting progress, then returns.
	// call_1 echo is_error=false: hello
	// call_2 echo is_error=false: world
	// call_3 fail is_error=true: disk full
	// call_4 lookup is_error=true: unknown tool "lookup". Registered tools: echo, fail, sleep
	// succeeded 2, failed 2
}

// Events arrive as they happen, for showing progress; breaking out of the
// loop cancels the batch.
func ExampleClient_ExecuteBatch() {
	addr, stop := startExampleServer()
	defer stop()
	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("call_1", "echo", `{"text":"hi"}`)}}
	for ev, err := range c.ExecuteBatch(context.Background(), req) {
		if err != nil {
			log.Fatal(err)
		}
		switch e := ev.GetEvent().(type) {
		case *toolwirev1.ExecuteBatchResponse_Accepted:
			fmt.Println("accepted, lanes:", len(e.Accepted.GetLanes()))
		case *toolwirev1.ExecuteBatchResponse_Started:
			fmt.Println("started", e.Started.GetCallId())
		case *toolwirev1.ExecuteBatchResponse_Progress:
			fmt.Println("progress", e.Progress.GetCallId(), e.Progress.GetMessage())
		case *toolwirev1.ExecuteBatchResponse_Result:
			fmt.Println("result", e.Result.GetCallId(), client.Text(e.Result))
		case *toolwirev1.ExecuteBatchResponse_Finished:
			fmt.Println("finished, succeeded:", e.Finished.GetSucceeded())
		}
	}
	// Output:
	// accepted, lanes: 1
	// started call_1
	// result call_1 hi
	// finished, succeeded: 1
}

// One call that needs no progress events: CallTool is the unary fast
// path. A failing tool is a result, as in a batch; an RPC error is what the
// runtime must fix, such as a call without an ID.
func ExampleClient_CallTool() {
	addr, stop := startExampleServer()
	defer stop()
	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	for _, call := range []*toolwirev1.ToolCall{
		client.Call("call_1", "echo", diag.EchoArgs{Text: "hello"}),
		client.Call("call_2", "fail", map[string]string{"message": "disk full"}),
	} {
		r, err := c.CallTool(ctx, &toolwirev1.CallToolRequest{Call: call})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s is_error=%v %s: %s\n", r.GetCallId(), r.GetToolName(), r.GetIsError(), r.GetErrorKind(), client.Text(r))
	}
	_, err = c.CallTool(ctx, &toolwirev1.CallToolRequest{Call: client.Call("", "echo", nil)})
	fmt.Println(status.Code(err), status.Convert(err).Message())
	// Output:
	// call_1 echo is_error=false ERROR_KIND_UNSPECIFIED: hello
	// call_2 fail is_error=true ERROR_KIND_TOOL_ERROR: disk full
	// InvalidArgument call 0 has an empty call_id
}

func printJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		log.Fatal(err)
	}
}

var exampleTool = &toolwirev1.Tool{
	Name:        "echo",
	Description: "Returns the given text unchanged.",
	InputSchema: `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
}

func ExampleOpenAITools() {
	printJSON(client.OpenAITools([]*toolwirev1.Tool{exampleTool}))
	// Output:
	// [
	//   {
	//     "type": "function",
	//     "function": {
	//       "name": "echo",
	//       "description": "Returns the given text unchanged.",
	//       "parameters": {
	//         "type": "object",
	//         "properties": {
	//           "text": {
	//             "type": "string"
	//           }
	//         },
	//         "required": [
	//           "text"
	//         ]
	//       }
	//     }
	//   }
	// ]
}

func ExampleAnthropicTools() {
	printJSON(client.AnthropicTools([]*toolwirev1.Tool{exampleTool}))
	// Output:
	// [
	//   {
	//     "name": "echo",
	//     "description": "Returns the given text unchanged.",
	//     "input_schema": {
	//       "type": "object",
	//       "properties": {
	//         "text": {
	//           "type": "string"
	//         }
	//       },
	//       "required": [
	//         "text"
	//       ]
	//     }
	//   }
	// ]
}

// A model's tool calls from the Chat Completions API become a batch, and
// each result the tool message that answers its call.
func ExampleFromOpenAIToolCalls() {
	toolCalls := []byte(`[{"id":"call_abc","type":"function","function":{"name":"echo","arguments":"{\"text\":\"hi\"}"}}]`)
	calls, err := client.FromOpenAIToolCalls(toolCalls)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(calls[0].GetCallId(), calls[0].GetName(), calls[0].GetArguments())

	// What ExecuteBatch returns for the call.
	result := &toolwirev1.CallResult{CallId: "call_abc", Content: []*toolwirev1.Content{
		{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: "hi"}}},
	}}
	printJSON(client.OpenAIToolMessage(result))
	// Output:
	// call_abc echo {"text":"hi"}
	// {
	//   "role": "tool",
	//   "tool_call_id": "call_abc",
	//   "content": "hi"
	// }
}

// The tool_use blocks of a Messages API response become a batch, and each
// result the tool_result block that answers its tool use.
func ExampleFromAnthropicToolUses() {
	content := []byte(`[
		{"type":"text","text":"Let me fail on purpose."},
		{"type":"tool_use","id":"toolu_01","name":"fail","input":{"message":"disk full"}}
	]`)
	calls, err := client.FromAnthropicToolUses(content)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(calls), calls[0].GetCallId(), calls[0].GetName(), calls[0].GetArguments())

	// What ExecuteBatch returns for the call.
	result := &toolwirev1.CallResult{CallId: "toolu_01", IsError: true, Content: []*toolwirev1.Content{
		{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: "disk full"}}},
	}}
	printJSON(client.AnthropicToolResult(result))
	// Output:
	// 1 toolu_01 fail {"message":"disk full"}
	// {
	//   "type": "tool_result",
	//   "tool_use_id": "toolu_01",
	//   "content": [
	//     {
	//       "type": "text",
	//       "text": "disk full"
	//     }
	//   ],
	//   "is_error": true
	// }
}

// A runtime that talks to several toolwire replicas, each keeping its
// sessions' workspace folders, keeps each session on one replica. The
// target resolves to every replica (here the pods of a headless Kubernetes
// Service); batches carry their session_id as usual.
func ExampleWithSessionAffinity() {
	c, err := client.New("dns:///toolwire-headless.agents.svc.cluster.local:50051", client.WithSessionAffinity())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{SessionId: "conversation-42", ...})
	fmt.Println(client.SessionAffinityServiceConfig)
	// Output: {"loadBalancingConfig":[{"ring_hash_experimental":{"requestHashHeader":"toolwire-session"}}]}
}
