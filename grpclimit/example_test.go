package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A gRPC server limited to 2 calls per hour per API key (metadata
// x-api-key). The third call fails with ResourceExhausted, a RetryInfo
// detail and a retry-after trailer.
func Example() {
	l, err := grpclimit.New(memstore.New(memstore.Options{}), []grpclimit.Limit{
		{Policy: sluice.SlidingLog(2, time.Hour).Named("per-key"), Key: grpclimit.Metadata("x-api-key")},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(l.Unary()), grpc.StreamInterceptor(l.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k-42")
	for i := 1; i <= 3; i++ {
		var trailer metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
		d, hasRetry := grpclimit.RetryDelay(err)
		fmt.Printf("call %d: %v, retry info: %v, trailer has retry-after: %v\n",
			i, status.Code(err), hasRetry && d >= time.Second, len(trailer.Get(grpclimit.RetryAfterKey)) == 1)
	}
	// Output:
	// call 1: OK, retry info: false, trailer has retry-after: false
	// call 2: OK, retry info: false, trailer has retry-after: false
	// call 3: ResourceExhausted, retry info: true, trailer has retry-after: true
}
