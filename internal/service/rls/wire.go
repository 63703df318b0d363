package rls

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// ServiceName is the gRPC name of the service, whose one method is
// ServiceName + "/ShouldRateLimit".
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Bytes that are not a RateLimitRequest are the caller's mistake, which
// gRPC calls InvalidArgument; grpc-go answers Internal for any message its
// codec cannot decode, before the method runs. So the service registers
// its method with a handler of its own (serviceDesc), which decodes the
// request into a request, and ServerOptions gives the server a codec that
// keeps a request's decoding error in it instead of failing the call
// (codec); the handler then answers InvalidArgument, inside the server's
// interceptors, so that a client they refuse learns nothing more. On a
// server without that codec, a request decodes as with the generated
// handler, and malformed bytes are Internal as before.

// request is what ShouldRateLimit's handler decodes a call into: the
// request, and why the call's bytes are not one (set by codec). Its
// methods are the request's, so that any protobuf codec decodes into it.
// It must not be copied.
type request struct {
	rlsv3.RateLimitRequest
	err error
}

// codec is the server's codec: grpc-go's protobuf codec, except that it
// keeps the decoding error of a request in it and reports success.
type codec struct{ encoding.CodecV2 }

func newCodec() codec { return codec{encoding.GetCodecV2(proto.Name)} }

// Unmarshal decodes data into v; a request keeps its error.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*request); ok {
		r.err = c.CodecV2.Unmarshal(data, &r.RateLimitRequest)
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// serviceDesc is rlsv3's service description with handleShouldRateLimit
// as the method's handler.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*rlsv3.RateLimitServiceServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: handleShouldRateLimit}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    "envoy/service/ratelimit/v3/rls.proto",
}

// handleShouldRateLimit is the generated handler of ShouldRateLimit, with
// a request that codec could not decode answered InvalidArgument.
func handleShouldRateLimit(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(request)
	if err := dec(in); err != nil {
		return nil, err
	}
	handler := func(ctx context.Context, req any) (any, error) {
		if in.err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "rls: the request is not a valid RateLimitRequest: %v", in.err)
		}
		return srv.(rlsv3.RateLimitServiceServer).ShouldRateLimit(ctx, req.(*rlsv3.RateLimitRequest))
	}
	if interceptor == nil {
		return handler(ctx, &in.RateLimitRequest)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, &in.RateLimitRequest, info, handler)
}
