package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeCheckReadTimeout runs the service with --check-read-timeout
// 200ms and the default --read-timeout of a minute, on real loopback
// connections: a POST /v1/check whose body stops halfway is answered 408
// and its connection closed after 200 ms, not a minute; a check whose
// body comes in two parts within it is decided, and its keep-alive
// connection serves the next check after the 200 ms; and an upload
// through the proxy that pauses longer than 200 ms reaches the upstream
// whole.
func TestServeCheckReadTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "read %d bytes, %v", n, err)
	}))
	t.Cleanup(upstream.Close)
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
limits:
  a: {algorithm: token_bucket, limit: 1000, period: 1s}
proxy:
  upstream: %q
  rules:
    - name: uploads
      match: {path_prefix: /upload}
      limits: [{limit: a, key: ip}]
`, upstream.URL))
	in := startServe(t, "--config", path, "--check-read-timeout", timeout.String())

	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", in.http)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	body := `{"limit":"a","key":"k"}`
	head := func(path string, n int) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, n)
	}
	read := func(br *bufio.Reader) (*http.Response, string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}

	t.Run("stalled check", func(t *testing.T) {
		c, br := dial()
		io.WriteString(c, head("/v1/check", len(body))+body[:len(body)/2])
		sent := time.Now()
		resp, b := read(br)
		took := time.Since(sent)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(b, "the request body did not arrive within 200ms") {
			t.Errorf("a check whose body stops halfway = %d %s, want 408 saying 200ms", resp.StatusCode, b)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("after the 408, reading the connection: %v, want EOF (closed by the service)", err)
		}
		t.Logf("a stalled check body was answered and its connection closed %v after it stopped", time.Since(sent).Round(time.Millisecond))
		if took < timeout || took > timeout+2*time.Second {
			t.Errorf("a stalled check body was answered after %v, want about %v", took, timeout)
		}
	})

	t.Run("check in two parts", func(t *testing.T) {
		c, br := dial()
		io.WriteString(c, head("/v1/check", len(body))+body[:5])
		time.Sleep(timeout / 4) // the client pauses mid-body, within the timeout
		io.WriteString(c, body[5:])
		if resp, b := read(br); resp.StatusCode != 200 || !strings.Contains(b, `"allowed":true`) {
			t.Fatalf("a check whose body came in two parts = %d %s, want 200", resp.StatusCode, b)
		}
		// The same connection, after the check's timeout has passed.
		time.Sleep(timeout + timeout/2) // the keep-alive connection idles past the timeout
		io.WriteString(c, head("/v1/check", len(body))+body)
		if resp, b := read(br); resp.StatusCode != 200 || !strings.Contains(b, `"allowed":true`) {
			t.Errorf("the next check on the connection = %d %s, want 200", resp.StatusCode, b)
		}
	})

	t.Run("slow upload through the proxy", func(t *testing.T) {
		c, br := dial()
		upload := strings.Repeat("u", 1000)
		io.WriteString(c, head("/upload", len(upload))+upload[:500])
		time.Sleep(3 * timeout) // the upload stalls well past the check's timeout
		io.WriteString(c, upload[500:])
		if resp, b := read(br); resp.StatusCode != 200 || b != "read 1000 bytes, <nil>" {
			t.Errorf("an upload that paused %v = %d %q, want 200 and the upstream read all 1000 bytes", 3*timeout, resp.StatusCode, b)
		}
	})
}
