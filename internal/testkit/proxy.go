package testkit

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// RedisProxy is a TCP proxy on a free loopback port that forwards every
// connection to a target address, for fault tests: it can delay the
// target's replies, cut a reply in the middle, and close every connection.
// Requests pass at once; replies are delayed without limiting throughput
// (each chunk leaves Delay after it arrived). Its methods are safe for
// concurrent use.
type RedisProxy struct {
	// Addr is the proxy's host:port, for clients to dial instead of the
	// target's.
	Addr string

	target   string
	ln       net.Listener
	delay    atomic.Int64 // ns added to every reply chunk
	dropNext atomic.Bool  // cut the next reply chunk in half and close

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup
}

// StartRedisProxy starts a proxy to target and closes it when t ends.
func StartRedisProxy(t testing.TB, target string) *RedisProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &RedisProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// SetDelay makes every reply from the target arrive d later; 0 removes
// the delay.
func (p *RedisProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// DropMidReply makes the proxy forward only the first half of the next
// reply chunk from the target and then close that connection, as a network
// that fails in the middle of a reply would.
func (p *RedisProxy) DropMidReply() { p.dropNext.Store(true) }

// CutAll closes every open connection through the proxy; new connections
// are still accepted.
func (p *RedisProxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy, closes every connection and waits for its
// goroutines to end.
func (p *RedisProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers c, or reports false when the proxy is closed.
func (p *RedisProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *RedisProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *RedisProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			client.Close()
			server.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(client, server)
		}()
	}
}

// pipe forwards one connection both ways until either side ends.
func (p *RedisProxy) pipe(client, server net.Conn) {
	defer p.untrack(client, server)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if _, werr := server.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		server.Close()
		client.Close()
	})
	p.replies(client, server)
	server.Close()
	client.Close()
	wg.Wait()
}

type chunk struct {
	data []byte
	due  time.Time
}

// replies forwards the target's replies to the client, each chunk Delay
// after it arrived.
func (p *RedisProxy) replies(client, server net.Conn) {
	queue := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := server.Read(buf)
			if n > 0 {
				queue <- chunk{buf[:n], time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	})
	for c := range queue {
		if d := time.Until(c.due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-p.done:
				t.Stop()
			}
		}
		data := c.data
		drop := p.dropNext.CompareAndSwap(true, false)
		if drop {
			data = data[:len(data)/2]
		}
		if _, err := client.Write(data); err != nil || drop {
			client.Close()
			server.Close()
			break
		}
	}
	for range queue {
		// Drain until the reader sees the closed connection.
	}
	wg.Wait()
}
