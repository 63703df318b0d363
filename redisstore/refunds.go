package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/ctxsleep"
)

// Refunds heard from other instances.
//
// A local refusal rests on one fact: other instances only add to a key's
// state. A refund, a settlement below its estimate and a reset take from
// it, and may make a key admissible that a cached state refuses. So every
// script that gives units back publishes the key it changed on the store's
// refund channel, in the same atomic step as the change, and every store
// with local refusals subscribes to that channel on a connection of its
// own and drops a key's state when it hears it. While the store is not
// subscribed (before its first subscription, after the connection broke,
// until it subscribes again) it learns no new state, and the states it
// holds go on refusing: Redis down is when refusing locally matters most,
// and then nothing can give units back. When it subscribes again it drops
// every state, since it cannot know what it missed. So a refund it could
// not hear outlives no refusal beyond the moment the store subscribes
// again (tried every 50 ms to 2 s while Redis answers) and MaxAge.

// refundChannel returns the channel on which the scripts of a store with
// prefix announce the keys they gave units back to.
func refundChannel(prefix string) string { return prefix + "refunded" }

// Bounds of the wait between two attempts to subscribe.
const (
	minResubscribe = 50 * time.Millisecond
	maxResubscribe = 2 * time.Second
)

// hearRefunds subscribes to the store's refund channel until ctx ends,
// again after every broken connection, and closes tried when the first
// attempt has ended, subscribed or not.
func (s *Store) hearRefunds(ctx context.Context, tried chan<- struct{}) {
	rf := s.refusals
	var once sync.Once
	done := func() { once.Do(func() { close(tried) }) }
	wait := minResubscribe
	for {
		if s.subscribe(ctx, done) {
			wait = minResubscribe
		} else {
			wait = min(2*wait, maxResubscribe)
		}
		done()
		// Deaf from here: learn nothing until subscribed again.
		rf.live.Store(false)
		if ctxsleep.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// subscribe subscribes once and listens until the connection breaks or
// ctx ends, and reports whether it was subscribed; subscribed is called
// once the subscription holds.
func (s *Store) subscribe(ctx context.Context, subscribed func()) bool {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	c, err := s.conn(cctx)
	cancel()
	if err != nil {
		return false
	}
	dc, release := c.Dedicate()
	defer release()
	rf := s.refusals
	channel := refundChannel(s.prefix)
	heard := make(chan struct{})
	broken := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			// Before the drop: a call sent before now may have read the
			// state before the refund, and its answer may come after.
			rf.refunded.Store(rf.mono())
			rf.drop(m.Message)
		},
		OnSubscription: func(sub rueidis.PubSubSubscription) {
			if sub.Kind == "subscribe" && sub.Channel == channel {
				// Refunds before now were not heard: no state from a
				// call sent before now is kept, and none held is.
				rf.refunded.Store(rf.mono())
				rf.clear()
				rf.live.Store(true)
				close(heard)
			}
		},
	})
	cctx, cancel = context.WithTimeout(ctx, s.timeout)
	err = dc.Do(cctx, dc.B().Subscribe().Channel(channel).Build()).Error()
	cancel()
	if err != nil {
		if _, ok := rueidis.IsRedisErr(err); ok {
			// Redis refused (an ACL without the channel, say): say so,
			// for local refusals stay off until it accepts.
			s.report(fmt.Errorf("redisstore: local refusals stay off until the store can subscribe to %q: %w", channel, err))
		}
		return false
	}
	select {
	case <-heard:
	case <-broken:
		return false
	case <-ctx.Done():
		return false
	}
	subscribed()
	select {
	case <-broken:
	case <-ctx.Done():
	}
	return true
}
