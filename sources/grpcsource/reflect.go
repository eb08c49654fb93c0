package grpcsource

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The reflection service's two versions have the same messages on the
// wire, so v1's Go types serve both.
const (
	reflectV1      = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	reflectV1Alpha = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
	// maxFiles and maxDescriptorBytes bound the descriptors one server
	// may send.
	maxFiles           = 2000
	maxDescriptorBytes = 32 << 20
)

// resolve lists the server's services through its reflection service (v1,
// or v1alpha when v1 is unimplemented) and resolves their descriptors and
// those they depend on, which make the resolver of the types an Any
// names. The reflection services themselves are left out.
func resolve(ctx context.Context, conn grpc.ClientConnInterface) ([]protoreflect.ServiceDescriptor, resolver, error) {
	svcs, types, err := resolveWith(ctx, conn, reflectV1)
	if status.Code(err) == codes.Unimplemented {
		svcs, types, err = resolveWith(ctx, conn, reflectV1Alpha)
	}
	return svcs, types, err
}

// resolver finds the message types an Any names (in arguments and in
// responses): the server's own, else those linked into toolwire (the
// well-known types among them).
type resolver struct {
	server *dynamicpb.Types
}

func (r resolver) FindMessageByName(name protoreflect.FullName) (protoreflect.MessageType, error) {
	if r.server != nil {
		if t, err := r.server.FindMessageByName(name); err == nil {
			return t, nil
		}
	}
	return protoregistry.GlobalTypes.FindMessageByName(name)
}

func (r resolver) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	if r.server != nil {
		if t, err := r.server.FindMessageByURL(url); err == nil {
			return t, nil
		}
	}
	return protoregistry.GlobalTypes.FindMessageByURL(url)
}

func (r resolver) FindExtensionByName(name protoreflect.FullName) (protoreflect.ExtensionType, error) {
	if r.server != nil {
		if t, err := r.server.FindExtensionByName(name); err == nil {
			return t, nil
		}
	}
	return protoregistry.GlobalTypes.FindExtensionByName(name)
}

func (r resolver) FindExtensionByNumber(message protoreflect.FullName, field protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	if r.server != nil {
		if t, err := r.server.FindExtensionByNumber(message, field); err == nil {
			return t, nil
		}
	}
	return protoregistry.GlobalTypes.FindExtensionByNumber(message, field)
}

func resolveWith(ctx context.Context, conn grpc.ClientConnInterface, method string) ([]protoreflect.ServiceDescriptor, resolver, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return nil, resolver{}, err
	}
	ask := func(req *rpb.ServerReflectionRequest) (*rpb.ServerReflectionResponse, error) {
		if err := stream.SendMsg(req); err != nil {
			return nil, err
		}
		resp := new(rpb.ServerReflectionResponse)
		if err := stream.RecvMsg(resp); err != nil {
			return nil, err
		}
		if e := resp.GetErrorResponse(); e != nil {
			return nil, status.Error(codes.Code(e.GetErrorCode()), e.GetErrorMessage())
		}
		return resp, nil
	}
	list, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{ListServices: "*"}})
	if err != nil {
		return nil, resolver{}, err
	}
	files := map[string]*descriptorpb.FileDescriptorProto{}
	var unread []string // files whose dependencies are not looked at yet
	size := 0
	add := func(resp *rpb.ServerReflectionResponse) error {
		for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
			if size += len(b); size > maxDescriptorBytes {
				return fmt.Errorf("the server's descriptors are larger than %d bytes", maxDescriptorBytes)
			}
			fd := new(descriptorpb.FileDescriptorProto)
			if err := proto.Unmarshal(b, fd); err != nil {
				return fmt.Errorf("a file descriptor from the reflection service: %w", err)
			}
			if _, ok := files[fd.GetName()]; !ok {
				if len(files) >= maxFiles {
					return fmt.Errorf("the server's descriptors span more than %d files", maxFiles)
				}
				files[fd.GetName()] = fd
				unread = append(unread, fd.GetName())
			}
		}
		return nil
	}
	var names []string
	listed := map[string]bool{} // a service listed twice is resolved once
	for _, s := range list.GetListServicesResponse().GetService() {
		name := s.GetName()
		if name == "grpc.reflection.v1.ServerReflection" || name == "grpc.reflection.v1alpha.ServerReflection" || listed[name] {
			continue
		}
		listed[name] = true
		names = append(names, name)
		resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: name}})
		if err != nil {
			return nil, resolver{}, fmt.Errorf("service %s: %w", name, err)
		}
		if err := add(resp); err != nil {
			return nil, resolver{}, err
		}
	}
	// A server sends a file's dependencies along, once per stream; ask for
	// any still missing. Each file's list is read once, as the file
	// arrives: a file may list hundreds of thousands (a 1.5 MB descriptor,
	// 100,000), which a search of the missing list for each made 81 s of
	// work that no deadline stopped.
	for len(unread) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, resolver{}, err
		}
		fd := files[unread[0]]
		unread = unread[1:]
		for _, dep := range fd.GetDependency() {
			if _, ok := files[dep]; ok {
				continue
			}
			resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileByFilename{FileByFilename: dep}})
			if err != nil {
				return nil, resolver{}, fmt.Errorf("file %s: %w", dep, err)
			}
			if err := add(resp); err != nil {
				return nil, resolver{}, err
			}
			if _, ok := files[dep]; !ok {
				return nil, resolver{}, fmt.Errorf("file %s: the reflection service did not send it", dep)
			}
		}
	}
	_ = stream.CloseSend()
	set := &descriptorpb.FileDescriptorSet{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		set.File = append(set.File, files[name])
	}
	reg, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, resolver{}, fmt.Errorf("the server's descriptors: %w", err)
	}
	svcs, err := services(reg, names)
	if err != nil {
		return nil, resolver{}, err
	}
	return svcs, resolver{server: dynamicpb.NewTypes(reg)}, nil
}

// services looks names up in reg.
func services(reg *protoregistry.Files, names []string) ([]protoreflect.ServiceDescriptor, error) {
	var out []protoreflect.ServiceDescriptor
	for _, name := range names {
		d, err := reg.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", name, err)
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			return nil, fmt.Errorf("%s is not a service", name)
		}
		out = append(out, sd)
	}
	return out, nil
}
