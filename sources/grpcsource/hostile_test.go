package grpcsource

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// waitLimit only keeps a broken test from hanging; nothing is timed.
const waitLimit = 30 * time.Second

// fakeReflection is a reflection service (v1) answering from files, a
// server broken or hostile as its files are: ListServices lists services,
// FileContainingSymbol sends the file of that name in symbolFile (every
// file, when symbolFile is nil), FileByFilename the file asked for.
// Requests counts what it was asked.
type fakeReflection struct {
	services   []string
	files      map[string]*descriptorpb.FileDescriptorProto
	symbolFile map[string]string
	requests   atomic.Int64
}

func (f *fakeReflection) handle(_ any, stream grpc.ServerStream) error {
	for {
		req := new(rpb.ServerReflectionRequest)
		if err := stream.RecvMsg(req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		f.requests.Add(1)
		resp := &rpb.ServerReflectionResponse{}
		var send []*descriptorpb.FileDescriptorProto
		switch r := req.MessageRequest.(type) {
		case *rpb.ServerReflectionRequest_ListServices:
			list := &rpb.ListServiceResponse{}
			for _, s := range f.services {
				list.Service = append(list.Service, &rpb.ServiceResponse{Name: s})
			}
			resp.MessageResponse = &rpb.ServerReflectionResponse_ListServicesResponse{ListServicesResponse: list}
		case *rpb.ServerReflectionRequest_FileContainingSymbol:
			if name, ok := f.symbolFile[r.FileContainingSymbol]; ok {
				send = append(send, f.files[name])
			} else if f.symbolFile == nil {
				for _, fd := range f.files {
					send = append(send, fd)
				}
			}
		case *rpb.ServerReflectionRequest_FileByFilename:
			if fd, ok := f.files[r.FileByFilename]; ok {
				send = append(send, fd)
			}
		}
		if len(send) > 0 || resp.MessageResponse == nil {
			fdr := &rpb.FileDescriptorResponse{}
			for _, fd := range send {
				b, err := proto.Marshal(fd)
				if err != nil {
					return err
				}
				fdr.FileDescriptorProto = append(fdr.FileDescriptorProto, b)
			}
			resp.MessageResponse = &rpb.ServerReflectionResponse_FileDescriptorResponse{FileDescriptorResponse: fdr}
		}
		if err := stream.SendMsg(resp); err != nil {
			return err
		}
	}
}

// serveReflection serves f as the reflection service of a server on a
// loopback TCP socket until the test ends, and returns its address.
// Other methods are unimplemented.
func serveReflection(t *testing.T, f *fakeReflection) string {
	t.Helper()
	gs := grpc.NewServer(grpc.MaxSendMsgSize(64 << 20))
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "grpc.reflection.v1.ServerReflection",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "ServerReflectionInfo", Handler: f.handle,
			ServerStreams: true, ClientStreams: true}},
	}, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// wideService is a file of one message of fields string fields, whose
// comment is comment bytes long, and a service "wide.Wide" of methods
// unary methods taking and returning it.
func wideService(fields, methods, comment int) *descriptorpb.FileDescriptorProto {
	msg := &descriptorpb.DescriptorProto{Name: proto.String("Big")}
	for i := range fields {
		msg.Field = append(msg.Field, &descriptorpb.FieldDescriptorProto{
			Name: proto.String(fmt.Sprintf("field_%05d", i)), Number: proto.Int32(int32(i + 1)),
			Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		})
	}
	svc := &descriptorpb.ServiceDescriptorProto{Name: proto.String("Wide")}
	for i := range methods {
		svc.Method = append(svc.Method, &descriptorpb.MethodDescriptorProto{
			Name: proto.String(fmt.Sprintf("M%05d", i)), InputType: proto.String(".wide.Big"), OutputType: proto.String(".wide.Big"),
		})
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("wide.proto"), Package: proto.String("wide"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{msg}, Service: []*descriptorpb.ServiceDescriptorProto{svc},
	}
	if comment > 0 {
		fd.SourceCodeInfo = &descriptorpb.SourceCodeInfo{Location: []*descriptorpb.SourceCodeInfo_Location{
			{Path: []int32{4, 0}, Span: []int32{0, 0, 1}, LeadingComments: proto.String(strings.Repeat("c", comment))},
		}}
	}
	return fd
}

// TestMethodsAreBounded resolves servers of many methods taking one
// message: each method's tool repeats that message's schema, so 154 KB
// of descriptors (a message of 7000 fields, ten methods) made 4.3 MB of
// declarations, and 1.2 MB (the same with a 1 MiB comment) 25 MB, with
// nothing to stop it at any number of methods. The tools are cut at the
// bounds of a listing, in tools and in bytes, those before the cut
// offered.
func TestMethodsAreBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fd      *descriptorpb.FileDescriptorProto
		bounds  listing.Bounds
		want    int
		atLeast int // bytes the tools kept must reach, with the bound in bytes
	}{
		{"more methods than a listing holds", wideService(5, 100, 0), listing.Bounds{Tools: 30, Bytes: 64 << 20, Pages: 1}, 30, 0},
		{"more bytes than a listing holds", wideService(5, 100, 20<<10), listing.Bounds{Tools: 10_000, Bytes: 200 << 10, Pages: 1}, 4, 160 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, reg, logs := newServices(t)
			s.bounds = tc.bounds
			addr := serveReflection(t, &fakeReflection{services: []string{"wide.Wide"}, files: map[string]*descriptorpb.FileDescriptorProto{"wide.proto": tc.fd}})
			if err := s.Sync(context.Background(), []Config{{Name: "w", Target: addr, Insecure: true}}); err != nil {
				t.Fatal(err)
			}
			snap := sourcetest.WaitTools(t, reg, "the tools before the cut", func(n []string) bool { return len(n) > 0 })
			size := 0
			for _, tl := range snap.Tools() {
				size += listing.Size(tools.Tool{Name: tl.Name, Title: tl.Title, Description: tl.Description, InputSchema: tl.InputSchema, OutputSchema: tl.OutputSchema})
			}
			if snap.Len() != tc.want || size > tc.bounds.Bytes || size < tc.atLeast {
				t.Errorf("%d tools of %d bytes offered, want %d within %d bytes", snap.Len(), size, tc.want, tc.bounds.Bytes)
			}
			if !strings.Contains(logs.String(), "cut short") {
				t.Errorf("no line says the methods were cut:\n%s", logs)
			}
		})
	}
}

// TestManyDependencies resolves a server whose file lists 200,000
// dependencies it does not have (3 MB of descriptor): each missing name
// was searched for in the list of those missing so far, quadratic work
// that no deadline stopped (100,000 took 81 s with a context of 100 ms).
// The resolution fails at the first file the server does not send, and
// gives up when its context ends.
func TestManyDependencies(t *testing.T) {
	t.Parallel()
	fd := wideService(1, 1, 0)
	for i := range 200_000 {
		fd.Dependency = append(fd.Dependency, fmt.Sprintf("d%06d.proto", i))
	}
	f := &fakeReflection{services: []string{"wide.Wide"}, files: map[string]*descriptorpb.FileDescriptorProto{"wide.proto": fd}}
	cc, err := grpc.NewClient(serveReflection(t, f), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := resolve(context.Background(), cc)
		done <- err
	}()
	select {
	case err := <-done:
		if want := "file d000000.proto: the reflection service did not send it"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("resolve: %v, want %q", err, want)
		}
	case <-time.After(waitLimit):
		t.Fatalf("resolve still running after %s", waitLimit)
	}
	if n := f.requests.Load(); n != 3 {
		t.Errorf("the server was asked %d times, want 3 (the services, the file, the first dependency)", n)
	}
}

// collidingMethods returns two method names past toolname.MaxLen whose
// tools' names, cut and ended with 8 hex digits of a hash of the method's
// full name in service, are the same.
func collidingMethods(service string) (string, string) {
	seen := map[[4]byte]string{}
	for i := 0; ; i++ {
		name := fmt.Sprintf("M%s%08d", strings.Repeat("x", 60), i)
		sum := sha256.Sum256([]byte(service + "/" + name))
		key := [4]byte(sum[:4])
		if other, ok := seen[key]; ok {
			return other, name
		}
		seen[key] = name
	}
}

// TestNamesTwice resolves a server that lists its service three times,
// and one with two methods whose tools' hashed names collide. Every other
// method is offered once: both made one name twice, which failed the
// update of all the server's tools (none offered).
func TestNamesTwice(t *testing.T) {
	t.Parallel()
	a, b := collidingMethods("wide.Wide")
	colliding := wideService(1, 1, 0)
	for _, m := range []string{a, b} {
		colliding.Service[0].Method = append(colliding.Service[0].Method, &descriptorpb.MethodDescriptorProto{
			Name: proto.String(m), InputType: proto.String(".wide.Big"), OutputType: proto.String(".wide.Big")})
	}
	for _, tc := range []struct {
		name     string
		services []string
		fd       *descriptorpb.FileDescriptorProto
		want     int
	}{
		{"a service listed thrice", []string{"wide.Wide", "wide.Wide", "wide.Wide"}, wideService(1, 2, 0), 2},
		{"hashed names that collide", []string{"wide.Wide"}, colliding, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, reg, logs := newServices(t)
			addr := serveReflection(t, &fakeReflection{services: tc.services, files: map[string]*descriptorpb.FileDescriptorProto{"wide.proto": tc.fd}})
			if err := s.Sync(context.Background(), []Config{{Name: "w", Target: addr, Insecure: true}}); err != nil {
				t.Fatal(err)
			}
			snap := sourcetest.WaitTools(t, reg, "the server's tools", func(n []string) bool { return len(n) > 0 })
			if snap.Len() != tc.want || !slices.Contains(snap.Names(), "w_Wide_M00000") {
				t.Errorf("tools %v, want %d with w_Wide_M00000\n%s", snap.Names(), tc.want, logs)
			}
		})
	}
}
