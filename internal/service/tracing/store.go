package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
)

// Store decorates next so that each decision call made under a recording
// span gets a child span: sluice.store.allow, .allow_all, .peek and
// .release, with the backend (memory or redis), the limits and keys (or
// key hashes) asked, the outcome and whether the failure policy decided
// (degraded). Calls without a span pass through. A nil t returns next.
func (t *Tracing) Store(next sluice.Store, backend string) sluice.Store {
	if t == nil {
		return next
	}
	return &store{Store: next, t: t, backend: backend}
}

type store struct {
	sluice.Store
	t       *Tracing
	backend string
}

// Unwrap returns the store beneath, for metrics.Underlying.
func (s *store) Unwrap() sluice.Store { return s.Store }

func (s *store) start(ctx context.Context, op string) (context.Context, trace.Span, bool) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil, false
	}
	ctx, span := s.t.tracer.Start(ctx, "sluice.store."+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("sluice.store.backend", s.backend), attribute.String("sluice.store.operation", op)))
	if s.backend == "redis" {
		span.SetAttributes(attribute.String("db.system.name", "redis"))
	}
	return ctx, span, true
}

func (s *store) end(span trace.Span, d sluice.Decision, err error) {
	span.SetAttributes(attribute.Bool("sluice.allowed", d.Allowed), attribute.Bool("sluice.degraded", d.Degraded))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (s *store) request(span trace.Span, req *sluice.Request) {
	if req.Policy != nil {
		span.SetAttributes(attribute.String("sluice.limit", req.Policy.Name), s.t.KeyAttr(req.Key), attribute.Int64("sluice.cost", req.Cost))
	}
}

func (s *store) Allow(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.decideOne(ctx, "allow", now, req, s.Store.Allow)
}

func (s *store) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.decideOne(ctx, "peek", now, req, s.Store.Peek)
}

// decideOne traces call, the store's Allow or Peek of one request, in a
// span named for op.
func (s *store) decideOne(ctx context.Context, op string, now time.Time, req sluice.Request,
	call func(context.Context, time.Time, sluice.Request) (sluice.Decision, error)) (sluice.Decision, error) {
	ctx, span, ok := s.start(ctx, op)
	if !ok {
		return call(ctx, now, req)
	}
	s.request(span, &req)
	d, err := call(ctx, now, req)
	s.end(span, d, err)
	return d, err
}

func (s *store) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	ctx, span, ok := s.start(ctx, "allow_all")
	if !ok {
		return s.Store.AllowAll(ctx, now, reqs, out)
	}
	span.SetAttributes(attribute.Int("sluice.store.requests", len(reqs)))
	d, err := s.Store.AllowAll(ctx, now, reqs, out)
	s.end(span, d, err)
	return d, err
}

func (s *store) Release(ctx context.Context, now time.Time, lease string, usage []int64) (bool, error) {
	ctx, span, ok := s.start(ctx, "release")
	if !ok {
		return s.Store.Release(ctx, now, lease, usage)
	}
	freed, err := s.Store.Release(ctx, now, lease, usage)
	span.SetAttributes(attribute.Bool("sluice.freed", freed))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return freed, err
}
