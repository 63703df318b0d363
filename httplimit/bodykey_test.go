package httplimit

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func multipartBody(t *testing.T, fields ...string) (string, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if strings.HasPrefix(fields[i], "file:") {
			fw, err := mw.CreateFormFile(strings.TrimPrefix(fields[i], "file:"), "f.txt")
			if err != nil {
				t.Fatal(err)
			}
			fw.Write([]byte(fields[i+1]))
			continue
		}
		mw.WriteField(fields[i], fields[i+1])
	}
	mw.Close()
	return b.String(), mw.FormDataContentType()
}

func TestBodyKeys(t *testing.T) {
	mp, mpType := multipartBody(t, "file:username", "not a key", "username", "alice", "username", "bob")
	mpFileOnly, mpFileType := multipartBody(t, "file:username", "alice")
	big := `{"username":"alice","pad":"` + strings.Repeat("x", 200) + `"}`
	tests := []struct {
		name        string
		contentType string
		body        string
		chunked     bool // unknown Content-Length
		spec        string
		max         int64
		wantKey     string
		wantOK      bool
	}{
		{"form", "application/x-www-form-urlencoded", "username=alice&password=x", false, "form:username", 0, "alice", true},
		{"form escaped", "application/x-www-form-urlencoded; charset=utf-8", "username=al%20ice+b", false, "form:username", 0, "al ice b", true},
		{"form first of repeated", "application/x-www-form-urlencoded", "username=alice&username=bob", false, "form:username", 0, "alice", true},
		{"form missing field", "application/x-www-form-urlencoded", "user=alice", false, "form:username", 0, "", false},
		{"form empty value", "application/x-www-form-urlencoded", "username=", false, "form:username", 0, "", false},
		{"form malformed", "application/x-www-form-urlencoded", "username=%zz", false, "form:username", 0, "", false},
		{"form wrong type", "application/json", `{"username":"alice"}`, false, "form:username", 0, "", false},
		{"form no type", "", "username=alice", false, "form:username", 0, "", false},
		{"multipart", mpType, mp, false, "form:username", 0, "alice", true},
		{"multipart file is no key", mpFileType, mpFileOnly, false, "form:username", 0, "", false},
		{"multipart no boundary", "multipart/form-data", mp, false, "form:username", 0, "", false},
		{"multipart truncated", mpType, mp[:len(mp)-20], false, "form:username", 0, "", false},
		{"json string", "application/json", `{"username":"alice","n":1}`, false, "json:username", 0, "alice", true},
		{"json +json type", "application/vnd.api+json", `{"username":"alice"}`, false, "json:username", 0, "alice", true},
		{"json no type", "", `{"username":"alice"}`, false, "json:username", 0, "alice", true},
		{"json number", "application/json", `{"account": 12345678901234567890}`, false, "json:account", 0, "12345678901234567890", true},
		{"json bool", "application/json", `{"admin":true}`, false, "json:admin", 0, "true", true},
		{"json last of repeated", "application/json", `{"username":"alice","username":"bob"}`, false, "json:username", 0, "bob", true},
		{"json null", "application/json", `{"username":null}`, false, "json:username", 0, "", false},
		{"json object", "application/json", `{"username":{"a":1}}`, false, "json:username", 0, "", false},
		{"json list", "application/json", `{"username":["a"]}`, false, "json:username", 0, "", false},
		{"json empty string", "application/json", `{"username":""}`, false, "json:username", 0, "", false},
		{"json nested not top level", "application/json", `{"user":{"username":"alice"}}`, false, "json:username", 0, "", false},
		{"json malformed", "application/json", `{"username":"alice"`, false, "json:username", 0, "", false},
		{"json not an object", "application/json", `["username"]`, false, "json:username", 0, "", false},
		{"json trailing garbage", "application/json", `{"username":"alice"} x`, false, "json:username", 0, "", false},
		{"json wrong type", "text/plain", `{"username":"alice"}`, false, "json:username", 0, "", false},
		{"json bad type", "application/json; =", `{"username":"alice"}`, false, "json:username", 0, "", false},
		{"oversized with length", "application/json", big, false, "json:username", 100, "", false},
		{"oversized chunked", "application/json", big, true, "json:username", 100, "", false},
		{"exactly the limit", "application/json", big, true, "json:username", int64(len(big)), "alice", true},
		{"joined with a header", "application/x-www-form-urlencoded", "username=alice", false, "form:username+header:X-Tenant", 0, "alice|acme", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, err := ParseKey(tt.spec, &KeyOptions{Sources: BodySources(&BodyOptions{MaxBytes: tt.max})})
			if err != nil {
				t.Fatal(err)
			}
			var body io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				body = io.MultiReader(body) // hides the length
			}
			r := httptest.NewRequest("POST", "/login", body)
			if tt.chunked {
				r.ContentLength = -1
			}
			if tt.contentType != "" {
				r.Header.Set("Content-Type", tt.contentType)
			}
			r.Header.Set("X-Tenant", "acme")
			key, ok := fn(r)
			if key != tt.wantKey || ok != tt.wantOK {
				t.Errorf("key(%q) = %q, %v, want %q, %v", tt.spec, key, ok, tt.wantKey, tt.wantOK)
			}
			// A second call parses the same buffered body.
			if key2, ok2 := fn(r); key2 != key || ok2 != ok {
				t.Errorf("second key(%q) = %q, %v, want %q, %v", tt.spec, key2, ok2, key, ok)
			}
			got, err := io.ReadAll(r.Body)
			if err != nil || string(got) != tt.body {
				t.Errorf("body after the key = %q, %v, want it intact (%d bytes)", got, err, len(tt.body))
			}
		})
	}
}

func TestBodyKeyNoBody(t *testing.T) {
	fn := FormValue("username", nil)
	for _, body := range []io.ReadCloser{nil, http.NoBody} {
		r := httptest.NewRequest("POST", "/login", nil)
		r.Body = body
		if key, ok := fn(r); ok {
			t.Errorf("FormValue on body %v = %q, true, want no key", body, key)
		}
		if r.Body != body {
			t.Errorf("the empty body was replaced by %T", r.Body)
		}
	}
}

// TestBodyKeyReadError: a body that fails midway gives no key, and the
// next reader gets the bytes read so far, then the same error.
func TestBodyKeyReadError(t *testing.T) {
	boom := errors.New("client went away")
	r := httptest.NewRequest("POST", "/login", nil)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.ContentLength = -1
	r.Body = io.NopCloser(io.MultiReader(strings.NewReader("username=al"), iotest.ErrReader(boom)))
	if err := BufferBody(r, 0); !errors.Is(err, boom) {
		t.Errorf("BufferBody = %v, want %v", err, boom)
	}
	if key, ok := FormValue("username", nil)(r); ok {
		t.Errorf("FormValue = %q, true, want no key", key)
	}
	got, err := io.ReadAll(r.Body)
	if string(got) != "username=al" || !errors.Is(err, boom) {
		t.Errorf("body = %q, %v, want %q, %v", got, err, "username=al", boom)
	}
}

// TestBodyKeyHuge: a huge body without a length is read no further than
// the limit plus one byte before the key is given up, and the rest still
// streams to the next reader.
func TestBodyKeyHuge(t *testing.T) {
	const size = 64 << 20
	var read countingReader
	read.r = io.LimitReader(zeros{}, size)
	r := httptest.NewRequest("POST", "/login", nil)
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = -1
	r.Body = io.NopCloser(&read)
	if key, ok := JSONField("username", &BodyOptions{MaxBytes: 1000})(r); ok {
		t.Errorf("JSONField = %q, true, want no key", key)
	}
	if read.n > 1001 {
		t.Errorf("the key function read %d bytes, want at most 1001", read.n)
	}
	n, err := io.Copy(io.Discard, r.Body)
	if n != size || err != nil {
		t.Errorf("the rest of the body = %d bytes, %v, want %d", n, err, size)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestBodySourcesErrors(t *testing.T) {
	for _, spec := range []string{"form", "form:", "json", "json:"} {
		if _, err := ParseKey(spec, &KeyOptions{Sources: BodySources(nil)}); err == nil || !strings.Contains(err.Error(), "needs a field name") {
			t.Errorf("ParseKey(%q) = %v, want an error asking for a field name", spec, err)
		}
	}
}

// TestBodyKeyMiddleware: a login handler behind the middleware reads the
// whole body, and the limit counts each account apart.
func TestBodyKeyMiddleware(t *testing.T) {
	m, err := New(memstore.New(memstore.Options{}), []Limit{{
		Policy: sluice.FixedWindow(2, time.Hour).Named("per-account"),
		Key:    FormValue("username", nil),
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		got = append(got, r.PostForm.Get("username")+":"+r.PostForm.Get("password"))
	}))
	for i, tc := range []struct {
		user string
		want int
	}{{"alice", 200}, {"alice", 200}, {"alice", 429}, {"bob", 200}} {
		r := httptest.NewRequest("POST", "/login", strings.NewReader("username="+tc.user+"&password=pw"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("request %d (%s) = %d, want %d", i, tc.user, w.Code, tc.want)
		}
	}
	if want := []string{"alice:pw", "alice:pw", "bob:pw"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the handler saw %v, want %v", got, want)
	}
}
