// Command gubernatord runs one gubernator v2 instance (github.com/gubernator-io/gubernator/v2)
// in its own process, started from its Go module with gubernator.SpawnDaemon, for the
// service benchmark in bench/service: the load generator then reaches gubernator the way it
// reaches `sluice serve`, over loopback from another process.
//
// The instance is a cluster of one that owns every key (peer discovery "none", the
// instance set as its only peer), with gubernator's defaults otherwise: a 50,000-entry LRU
// cache, one worker per CPU, its gRPC API and its HTTP/JSON gateway. Once both listen it
// writes {"http":ADDR,"grpc":ADDR,"pid":PID} to the --ready-file; it stops on SIGTERM or
// SIGINT.
//
//	gubernatord --ready-file /tmp/guber.json [--cache-size 50000] [--workers 0]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gubernatord:", err)
		os.Exit(1)
	}
}

// ready is the content of the --ready-file, in the shape of sluice serve's.
type ready struct {
	HTTP string `json:"http"`
	GRPC string `json:"grpc"`
	PID  int    `json:"pid"`
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gubernatord", flag.ContinueOnError)
	readyFile := fs.String("ready-file", "", "write the bound addresses to this file as JSON once listening")
	cacheSize := fs.Int("cache-size", 50_000, "entries of the LRU cache (gubernator's default)")
	workers := fs.Int("workers", 0, "workers; 0 is gubernator's default, one per CPU")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *readyFile == "" {
		return errors.New("--ready-file is required")
	}

	// The HTTP gateway dials the gRPC listen address as configured, so
	// the address must name a real port, not port 0.
	grpcAddr, err := freeAddr()
	if err != nil {
		return err
	}
	logger := logrus.New()
	logger.SetLevel(logrus.WarnLevel)
	log := logrus.NewEntry(logger)

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	d, err := gubernator.SpawnDaemon(startCtx, gubernator.DaemonConfig{
		GRPCListenAddress: grpcAddr,
		HTTPListenAddress: "127.0.0.1:0",
		AdvertiseAddress:  grpcAddr,
		PeerDiscoveryType: "none",
		CacheSize:         *cacheSize,
		Workers:           *workers,
		Logger:            log,
		InstanceID:        "bench",
	})
	cancel()
	if err != nil {
		return fmt.Errorf("spawning the daemon: %w", err)
	}
	defer d.Close()
	self := gubernator.PeerInfo{
		GRPCAddress: d.GRPCListeners[0].Addr().String(),
		HTTPAddress: d.HTTPListener.Addr().String(),
		IsOwner:     true,
	}
	d.SetPeers([]gubernator.PeerInfo{self})

	if err := writeReady(*readyFile, ready{HTTP: self.HTTPAddress, GRPC: self.GRPCAddress, PID: os.Getpid()}); err != nil {
		return err
	}
	defer os.Remove(*readyFile)
	<-ctx.Done()
	return nil
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// writeReady writes r to path atomically: a reader sees no file or all of
// it.
func writeReady(path string, r ready) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the ready file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing the ready file: %w", err)
	}
	return nil
}
