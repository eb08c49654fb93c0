package grpcsource

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"testing"
	"time"

	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// FuzzSchema: any descriptor set that protodesc accepts gives, for every
// message, input and output schemas that compile. The seeds run with
// every go test; go test -fuzz FuzzSchema explores.
func FuzzSchema(f *testing.F) {
	b, err := os.ReadFile("testdata/mapping.binpb")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	health, _ := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{protodesc.ToFileDescriptorProto(healthpb.File_grpc_health_v1_health_proto)}})
	f.Add(health)
	f.Fuzz(func(t *testing.T, data []byte) {
		var set descriptorpb.FileDescriptorSet
		if proto.Unmarshal(data, &set) != nil {
			return
		}
		files, err := protodesc.NewFiles(&set)
		if err != nil {
			return
		}
		var msgs []protoreflect.MessageDescriptor
		var walk func(ms protoreflect.MessageDescriptors)
		walk = func(ms protoreflect.MessageDescriptors) {
			for i := range ms.Len() {
				msgs = append(msgs, ms.Get(i))
				walk(ms.Get(i).Messages())
			}
		}
		files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
			walk(fd.Messages())
			return true
		})
		for _, md := range msgs {
			for _, output := range []bool{false, true} {
				s, err := json.Marshal(newSchemaGen(output).document(md))
				if err != nil {
					t.Fatalf("%s: %v", md.FullName(), err)
				}
				tl := tools.Tool{Name: "f", OutputSchema: s, Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }}
				if _, err := tools.NewRegistry(tl); err != nil {
					t.Errorf("%s (output %v): the schema does not compile: %v\n%s", md.FullName(), output, err, s)
				}
			}
		}
	})
}

// BenchmarkHealthCheck calls grpc.health.v1.Health/Check on a loopback
// server directly with the generated client and as a reflected tool (the
// handler: protojson in, dynamicpb, the same kind of connection, protojson
// out), alternating one of each per iteration so that the machine's load
// weighs on both alike; it reports each one's time and their ratio.
func BenchmarkHealthCheck(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	reflection.Register(gs)
	go gs.Serve(lis)
	defer gs.Stop()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	direct := healthpb.NewHealthClient(cc)

	reg, _ := tools.NewRegistry()
	s := New(reg, nil)
	defer s.Close()
	if err := s.Sync(context.Background(), []Config{{Name: "h", Target: lis.Addr().String(), Insecure: true}}); err != nil {
		b.Fatal(err)
	}
	var tl *tools.Tool
	for tl == nil {
		changed := reg.Changed()
		if t, ok := reg.Snapshot().Lookup("h_Health_Check"); ok {
			tl = t
			break
		}
		<-changed
	}
	call := tools.NewCall("c", "h_Health_Check", []byte(`{"service":""}`), nil)

	var directTime, reflectedTime time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if _, err := direct.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		res, err := tl.Handler(context.Background(), call)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
		directTime += mid.Sub(start)
		reflectedTime += time.Since(mid)
	}
	b.ReportMetric(float64(directTime.Nanoseconds())/float64(b.N), "direct-ns/call")
	b.ReportMetric(float64(reflectedTime.Nanoseconds())/float64(b.N), "reflected-ns/call")
	b.ReportMetric(float64(reflectedTime)/float64(directTime), "ratio")
}
