package grpcsource

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// fileSet is the descriptor set of fd and the files it imports, but for
// the imports skip names (and theirs), which fd must use only for
// options.
func fileSet(fd protoreflect.FileDescriptor, skip ...string) []byte {
	var set descriptorpb.FileDescriptorSet
	seen := map[string]bool{}
	for _, s := range skip {
		seen[s] = true
	}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		fdp := protodesc.ToFileDescriptorProto(fd)
		fdp.Dependency = slices.DeleteFunc(fdp.Dependency, func(d string) bool { return slices.Contains(skip, d) })
		set.File = append(set.File, fdp)
	}
	add(fd)
	b, _ := proto.Marshal(&set)
	return b
}

// FuzzSchema: any descriptor set that protodesc accepts gives, for every
// message, input, output and stream schemas that compile; and any value of
// a message (msg, decoded as each message in turn), written as protojson
// writes it, is valid under the message's output schema, and under its
// input schema too once the enum numbers the descriptor does not name
// (which protojson writes as numbers, and requests must name) are cleared.
// The seeds run with every go test; go test -fuzz FuzzSchema explores.
// (Google's CEL conformance service, a larger seed, made each run take
// seconds; TestCELConformance checks real values of it end to end.)
func FuzzSchema(f *testing.F) {
	b, err := os.ReadFile("testdata/mapping.binpb")
	if err != nil {
		f.Fatal(err)
	}
	md, _ := everything(f)
	var args []byte
	for _, a := range []string{
		`{"i32":-3,"i64":"-9007199254740993","u64":"18446744073709551615","s32":-1,"f64":"7","d":1.5,"f":"NaN","b":true,"text":"héllo","data":"AAEC",` +
			`"color":"COLOR_RED","tags":["a","b"],"counts":{"x":"1"},"inners":{"5":{"name":"five","more":[{"name":"six"}]}},"inner":{"name":"in"},"left":"L",` +
			`"when":"2026-12-02T03:04:05.5+01:00","took":"-1.5s","meta":{"k":[1,"two",null]},"anyValue":{"a":true},"big":"42","maybe":false,"mask":"text,inner.name",` +
			`"child":{"text":"kid","child":{"i32":1,"right":7}},"note":"","flags":{"true":"t"},"ids":{"7":"s"},` +
			`"thing":{"@type":"type.googleapis.com/toolwire.test.mapping.Inner","name":"x"}}`,
	} {
		m := dynamicpb.NewMessage(md)
		if err := (protojson.UnmarshalOptions{Resolver: resolver{server: dynamicpb.NewTypes(loadMapping(f))}}).Unmarshal([]byte(a), m); err != nil {
			f.Fatal(err)
		}
		args, _ = proto.Marshal(m)
	}
	f.Add(b, args)
	f.Add(b, []byte{0x58, 0x05}) // color: 5, a number Color does not name
	f.Add(fileSet(healthpb.File_grpc_health_v1_health_proto), []byte{0x08, 0x01})
	f.Fuzz(func(t *testing.T, data, msg []byte) {
		var set descriptorpb.FileDescriptorSet
		if proto.Unmarshal(data, &set) != nil {
			return
		}
		files, err := protodesc.NewFiles(&set)
		if err != nil {
			return
		}
		types := resolver{server: dynamicpb.NewTypes(files)}
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
			if md.IsMapEntry() {
				continue
			}
			compiled := map[string]*tools.Tool{}
			for what, schema := range map[string]map[string]any{"input": inputSchema(md), "output": outputSchema(md), "stream": newSchemaGen(true).streamDocument(md)} {
				s, err := json.Marshal(schema)
				if err != nil {
					t.Fatalf("%s: %v", md.FullName(), err)
				}
				tl := tools.Tool{Name: "f", OutputSchema: s, Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }}
				reg, err := tools.NewRegistry(tl)
				if err != nil {
					t.Errorf("%s (%s): the schema does not compile: %v\n%s", md.FullName(), what, err, s)
					continue
				}
				compiled[what], _ = reg.Snapshot().Lookup("f")
			}
			m := dynamicpb.NewMessage(md)
			if len(compiled) < 3 || proto.Unmarshal(msg, m) != nil {
				continue
			}
			js, err := (protojson.MarshalOptions{Resolver: types}).Marshal(m)
			if err != nil {
				continue // not UTF-8, a time out of range, an Any of an unknown type: the server's to fix
			}
			if err := compiled["output"].ValidateOutput(js); err != nil {
				t.Errorf("%s: protojson's %s fails the output schema: %v", md.FullName(), js, err)
			}
			clearUnnamedEnums(m)
			if js, err = (protojson.MarshalOptions{Resolver: types}).Marshal(m); err != nil {
				t.Fatal(err)
			}
			if err := compiled["input"].ValidateOutput(js); err != nil {
				t.Errorf("%s: protojson's %s fails the input schema: %v", md.FullName(), js, err)
			}
		}
	})
}

// clearUnnamedEnums clears, throughout m, the enum values its descriptor
// does not name.
func clearUnnamedEnums(m protoreflect.Message) {
	named := func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		// protojson writes any NullValue as null.
		return fd.Enum().FullName() == "google.protobuf.NullValue" || fd.Enum().Values().ByNumber(v.Enum()) != nil
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			mv := fd.MapValue()
			var drop []protoreflect.MapKey
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				switch mv.Kind() {
				case protoreflect.EnumKind:
					if !named(mv, e) {
						drop = append(drop, k)
					}
				case protoreflect.MessageKind, protoreflect.GroupKind:
					clearUnnamedEnums(e.Message())
				}
				return true
			})
			for _, k := range drop {
				v.Map().Clear(k)
			}
		case fd.IsList():
			l := v.List()
			switch fd.Kind() {
			case protoreflect.EnumKind:
				kept := 0
				for i := range l.Len() {
					if named(fd, l.Get(i)) {
						l.Set(kept, l.Get(i))
						kept++
					}
				}
				l.Truncate(kept)
			case protoreflect.MessageKind, protoreflect.GroupKind:
				for i := range l.Len() {
					clearUnnamedEnums(l.Get(i).Message())
				}
			}
		case fd.Kind() == protoreflect.EnumKind:
			if !named(fd, v) {
				m.Clear(fd)
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			clearUnnamedEnums(v.Message())
		}
		return true
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
