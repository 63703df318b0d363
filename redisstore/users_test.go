package redisstore

import (
	"sync"
	"testing"
	"testing/synctest"
)

// TestUsers checks the count of the client's users that Close waits for:
// close waits until the last user exits, and enter fails from then on,
// however many late callers try.
func TestUsers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := newUsers()
		for range 2 {
			if !u.enter() {
				t.Fatal("enter failed before close")
			}
		}
		closed := make(chan struct{})
		go func() {
			u.close()
			close(closed)
		}()
		u.exit()
		synctest.Wait() // close has begun, and waits or has returned
		select {
		case <-closed:
			t.Fatal("close returned with a user left")
		default:
		}
		if u.n.Load() < closing {
			t.Fatal("close did not begin")
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if u.enter() {
					t.Error("enter succeeded after close began")
					u.exit()
				}
			})
		}
		wg.Wait()
		u.exit()
		synctest.Wait()
		select {
		case <-closed:
		default:
			t.Fatal("close did not return after the last user exited")
		}
		if u.enter() {
			t.Error("enter succeeded after close")
		}

		// With no user, close returns at once.
		idle := newUsers()
		idle.close()
		if idle.enter() {
			t.Error("enter succeeded after close")
		}
	})
}
