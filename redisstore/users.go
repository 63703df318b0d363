package redisstore

import (
	"sync"
	"sync/atomic"
)

// users counts the goroutines that use the store's client, so that Close
// closes the client only once none does: rueidis may dial a new connection
// for a command that races with Close and leave it open.
type users struct {
	n    atomic.Int64 // users, plus closing once Close has begun
	idle chan struct{}
	once sync.Once
}

// closing is added to users.n when Close begins; no count of users reaches
// it.
const closing = 1 << 62

func newUsers() *users { return &users{idle: make(chan struct{})} }

// enter counts one more user, or reports false (and counts none) once
// Close has begun.
func (u *users) enter() bool {
	if u.n.Add(1) >= closing {
		u.exit()
		return false
	}
	return true
}

// exit counts one user fewer.
func (u *users) exit() {
	if u.n.Add(-1) == closing {
		u.once.Do(func() { close(u.idle) })
	}
}

// close makes every later enter fail and waits until no user is left.
func (u *users) close() {
	if u.n.Add(closing) != closing {
		<-u.idle
	}
}
