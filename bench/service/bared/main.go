// Command bared is the floor of the service benchmark in bench/service: a
// Go server that answers POST /v1/check and Envoy's ShouldRateLimit with
// the shape of Sluice's answers but decides nothing, over the same
// net/http and grpc-go servers as `sluice serve`, with the same gRPC
// server options (rls.ServerOptions) and garbage collector target. What a Sluice run costs
// beyond a bared run is what Sluice itself does: decoding, deciding,
// metrics, headers.
//
// It writes {"http":ADDR,"grpc":ADDR,"pid":PID} to the --ready-file once
// listening on free loopback ports, and stops on SIGTERM or SIGINT.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	sluicerls "github.com/sluicehq/sluice/internal/service/rls"
)

func main() {
	// The garbage collector's target of sluice serve (cmd/sluice/gc.go),
	// so that the floor runs the same runtime settings.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bared:", err)
		os.Exit(1)
	}
}

// answer is the body of every HTTP answer: an allowed decision as Sluice
// writes it.
var answer = []byte(`{"allowed":true,"limit":1000000,"remaining":999999,"retry_after_ms":0,"reset_after_ms":1}` + "\n")

var jsonType = []string{"application/json"}

func serveCheck(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header()["Content-Type"] = jsonType
	w.Write(answer)
}

// rls answers every ShouldRateLimit OK, one status per descriptor, as
// Sluice answers an allowed one.
type rls struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (rls) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:           rlsv3.RateLimitResponse_OK,
			CurrentLimit:   &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1_000_000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining: 999_999,
		})
	}
	return resp, nil
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bared", flag.ContinueOnError)
	readyFile := fs.String("ready-file", "", "write the bound addresses to this file as JSON once listening")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *readyFile == "" {
		return errors.New("--ready-file is required")
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hl.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", serveCheck)
	hs := &http.Server{Handler: mux}
	// The options of sluice serve's gRPC server: the floor is the same
	// server.
	gs := grpc.NewServer(sluicerls.ServerOptions()...)
	rlsv3.RegisterRateLimitServiceServer(gs, rls{})

	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(hl) }()
	go func() { errc <- gs.Serve(gl) }()

	b, err := json.Marshal(map[string]any{"http": hl.Addr().String(), "grpc": gl.Addr().String(), "pid": os.Getpid()})
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(*readyFile), "."+filepath.Base(*readyFile)+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, *readyFile); err != nil {
		return err
	}
	defer os.Remove(*readyFile)

	var failed error
	select {
	case <-ctx.Done():
	case failed = <-errc:
	}
	gs.Stop()
	hs.Close()
	return failed
}
