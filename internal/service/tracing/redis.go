package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/redisstore"
)

// Redis returns the observer of the Redis store's script calls
// (redisstore.Options.Observe): each call made under a recording span, a
// store call's, becomes its child span "sluice.redis SCRIPT", from the
// call's start to its end, with the script, on Redis Cluster the slot and
// the master, and the error. A nil t returns nil, which observes nothing
// and costs nothing.
func (t *Tracing) Redis() func(context.Context, redisstore.Call) {
	if t == nil {
		return nil
	}
	return func(ctx context.Context, c redisstore.Call) {
		if !trace.SpanFromContext(ctx).IsRecording() {
			return
		}
		attrs := []attribute.KeyValue{attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", "EVALSHA"),
			attribute.String("sluice.redis.script", c.Script)}
		if c.Slot >= 0 {
			attrs = append(attrs, attribute.Int("sluice.redis.slot", c.Slot))
		}
		if c.Master != "" {
			attrs = append(attrs, attribute.String("sluice.redis.master", c.Master))
		}
		_, span := t.tracer.Start(ctx, "sluice.redis "+c.Script, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(c.Start), trace.WithAttributes(attrs...))
		if c.Err != nil {
			span.RecordError(c.Err)
			span.SetStatus(codes.Error, c.Err.Error())
		}
		span.End(trace.WithTimestamp(c.Start.Add(c.Duration)))
	}
}
