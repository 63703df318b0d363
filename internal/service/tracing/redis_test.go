package tracing

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/redisstore"
)

// TestRedisSpans: a script call under a recording span becomes its child,
// with the call's times, script, slot, master and error; one without a
// recording span records nothing; a nil Tracing observes nothing.
func TestRedisSpans(t *testing.T) {
	if (*Tracing)(nil).Redis() != nil {
		t.Fatal("a nil Tracing's Redis observer is not nil")
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := &Tracing{provider: tp, tracer: tp.Tracer(ScopeName)}
	observe := tr.Redis()

	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	observe(context.Background(), redisstore.Call{Script: "single", Slot: -1, Start: start, Duration: time.Millisecond})
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans without a recording parent, want none", n)
	}
	ctx, parent := tr.tracer.Start(context.Background(), "sluice.store.allow")
	observe(ctx, redisstore.Call{Script: "tat_single", Slot: 7177, Master: "127.0.0.1:7000", Start: start, Duration: 3 * time.Millisecond, Err: errors.New("EOF")})
	parent.End()
	var got sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "sluice.redis tat_single" {
			got = s
		}
	}
	if got == nil {
		t.Fatalf("no span sluice.redis tat_single among %d", len(rec.Ended()))
	}
	if got.Parent().SpanID() != parent.SpanContext().SpanID() || !got.StartTime().Equal(start) || got.EndTime().Sub(got.StartTime()) != 3*time.Millisecond {
		t.Errorf("span parent %v, %v to %v; want the store span's child over the call's 3ms", got.Parent().SpanID(), got.StartTime(), got.EndTime())
	}
	want := map[attribute.Key]string{"sluice.redis.script": "tat_single", "sluice.redis.master": "127.0.0.1:7000", "db.system.name": "redis", "sluice.redis.slot": "7177"}
	for _, kv := range got.Attributes() {
		if w, ok := want[kv.Key]; ok {
			if kv.Value.String() != w {
				t.Errorf("%s = %s, want %s", kv.Key, kv.Value.String(), w)
			}
			delete(want, kv.Key)
		}
	}
	if len(want) != 0 {
		t.Errorf("attributes missing: %v", want)
	}
	if got.Status().Description != "EOF" || len(got.Events()) == 0 {
		t.Errorf("status %+v, %d events; want the error recorded", got.Status(), len(got.Events()))
	}
}
