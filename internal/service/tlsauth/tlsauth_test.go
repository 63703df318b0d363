package tlsauth_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/service/tlsauth"
	"github.com/sluicehq/sluice/internal/testkit"
)

// writeServer writes a server certificate and key (and the CA, when ca
// is not nil) into dir and returns their Files.
func writeServer(t *testing.T, dir string, is *testkit.Issued, ca *testkit.CA) tlsauth.Files {
	t.Helper()
	f := tlsauth.Files{
		CertFile: testkit.WriteCertFile(t, dir, "server.pem", is.CertPEM),
		KeyFile:  testkit.WriteCertFile(t, dir, "server-key.pem", is.KeyPEM),
	}
	if ca != nil {
		f.ClientCAFile = testkit.WriteCertFile(t, dir, "ca.pem", ca.PEM)
	}
	return f
}

func TestLoadRefusesBadFiles(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	good := ca.Issue(t, testkit.Leaf{CommonName: "server"})
	other := ca.Issue(t, testkit.Leaf{CommonName: "other"})
	expired := ca.Issue(t, testkit.Leaf{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	now := time.Now()
	tests := []struct {
		name       string
		cert, key  []byte
		ca         []byte
		caSet      bool
		want       string
		missingKey bool
	}{
		{name: "good", cert: good.CertPEM, key: good.KeyPEM},
		{name: "good with CA", cert: good.CertPEM, key: good.KeyPEM, ca: ca.PEM, caSet: true},
		{name: "key of another certificate", cert: good.CertPEM, key: other.KeyPEM, want: "does not belong to the certificate"},
		{name: "expired", cert: expired.CertPEM, key: expired.KeyPEM, want: "expired at"},
		{name: "not PEM", cert: []byte("hello"), key: good.KeyPEM, want: "holds no PEM block"},
		{name: "key not PEM", cert: good.CertPEM, key: []byte("secret"), want: "holds no PEM block"},
		{name: "key swapped with cert", cert: good.KeyPEM, key: good.CertPEM, want: "server.pem and"},
		{name: "CA without certificate", cert: good.CertPEM, key: good.KeyPEM, ca: []byte("# empty\n"), caSet: true, want: "holds no PEM certificate"},
		{name: "CA damaged", cert: good.CertPEM, key: good.KeyPEM, ca: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), caSet: true, want: "does not parse"},
		{name: "missing key file", cert: good.CertPEM, missingKey: true, want: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			f := tlsauth.Files{CertFile: testkit.WriteCertFile(t, dir, "server.pem", tt.cert), KeyFile: dir + "/server-key.pem"}
			if !tt.missingKey {
				testkit.WriteCertFile(t, dir, "server-key.pem", tt.key)
			}
			if tt.caSet {
				f.ClientCAFile = testkit.WriteCertFile(t, dir, "ca.pem", tt.ca)
			}
			m, err := tlsauth.Load(f, now)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if m.Serial() != good.Cert.SerialNumber.Text(16) || !m.NotAfter().Equal(good.Cert.NotAfter) {
					t.Errorf("Load: serial %s, not after %v; want %s, %v", m.Serial(), m.NotAfter(), good.Cert.SerialNumber.Text(16), good.Cert.NotAfter)
				}
				if (m.ClientCAs != nil) != tt.caSet {
					t.Errorf("ClientCAs set = %v, want %v", m.ClientCAs != nil, tt.caSet)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load: %v, want an error with %q", err, tt.want)
			}
			if bytes.Contains([]byte(err.Error()), []byte("PRIVATE KEY-----")) {
				t.Errorf("the error quotes the key: %v", err)
			}
		})
	}
}

func TestParseNameAndAllows(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	cert := ca.Issue(t, testkit.Leaf{
		Client: true, CommonName: "edge.internal",
		DNS:    []string{"Edge.Example.com"},
		URIs:   []string{"spiffe://cluster.local/ns/edge/sa/envoy"},
		Emails: []string{"ops@Example.org"},
	}).Cert
	tests := []struct {
		names []string
		want  bool
	}{
		{[]string{"edge.example.com"}, true},
		{[]string{"EDGE.example.com."}, true},
		{[]string{"spiffe://cluster.local/ns/edge/sa/envoy"}, true},
		{[]string{"spiffe://cluster.local/ns/edge/sa/other"}, false},
		{[]string{"ops@example.org"}, true},
		{[]string{"Ops@example.org"}, false}, // the local part is case-sensitive
		{[]string{"edge.internal"}, false},   // the common name is not a SAN
		{[]string{"other.example.com", "ops@example.org"}, true},
		{nil, true},
	}
	for _, tt := range tests {
		n, err := tlsauth.ParseNames(tt.names)
		if err != nil {
			t.Fatalf("ParseNames(%q): %v", tt.names, err)
		}
		if got := n.Allows(cert); got != tt.want {
			t.Errorf("ParseNames(%q).Allows = %v, want %v", tt.names, got, tt.want)
		}
	}
	for _, bad := range []string{"", " edge", "*.example.com", "spiffe://", "spiffe:///path", "https://u@h/", "a@", "@b.com", "not a name", "ex\x00ample", "bad_label.com"} {
		if _, _, err := tlsauth.ParseName(bad); err == nil {
			t.Errorf("ParseName(%q): no error", bad)
		}
	}
	if _, err := tlsauth.ParseNames([]string{"ok.example", "*"}); err == nil || !strings.Contains(err.Error(), "entry 1") {
		t.Errorf("ParseNames with a bad second entry: %v, want one naming entry 1", err)
	}
	got := tlsauth.Presented(cert)
	want := []string{"DNS:Edge.Example.com", "URI:spiffe://cluster.local/ns/edge/sa/envoy", "email:ops@Example.org", "CN:edge.internal"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Presented = %q, want %q", got, want)
	}
}

func TestTokens(t *testing.T) {
	tok, err := tlsauth.ParseTokens([]byte("# clients\n\n  aaaaaaaaaaaaaaaa1  \nbbbbbbbbbbbbbbbb2\r\n# old: cccccccccccccccc\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Len() != 2 {
		t.Fatalf("Len = %d, want 2", tok.Len())
	}
	for auth, want := range map[string]bool{
		"Bearer aaaaaaaaaaaaaaaa1":  true,
		"bearer bbbbbbbbbbbbbbbb2":  true,
		"Bearer  bbbbbbbbbbbbbbbb2": true,
		"Bearer cccccccccccccccc":   false,
		"Bearer aaaaaaaaaaaaaaaa":   false,
		"Basic aaaaaaaaaaaaaaaa1":   false,
		"aaaaaaaaaaaaaaaa1":         false,
		"":                          false,
	} {
		if got := tok.Match(auth); got != want {
			t.Errorf("Match(%q) = %v, want %v", auth, got, want)
		}
	}
	for data, want := range map[string]string{
		"":                   "holds no token",
		"# only a comment\n": "holds no token",
		"short\n":            "line 1: the token is too short",
		"aaaaaaaaaaaaaaaa1\nwith space in it x\n":  "line 2: the token must hold visible ASCII",
		"aaaaaaaaaaaaaaaa1\n\naaaaaaaaaaaaaaaa1\n": "line 3: the same token as line 1",
	} {
		_, err := tlsauth.ParseTokens([]byte(data))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTokens(%q): %v, want %q", data, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "aaaaaaaaaaaaaaaa1") {
			t.Errorf("ParseTokens(%q): the error quotes a token: %v", data, err)
		}
	}
	var none *tlsauth.Tokens
	if none.Match("Bearer aaaaaaaaaaaaaaaa1") {
		t.Error("a nil Tokens matched")
	}
}

// serveTLS serves a handler over TLS from s, behind its guard, and
// returns the URL.
func serveTLS(t *testing.T, s *tlsauth.Server, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(s.Guard("listen.http").HTTP(h))
	srv.TLS = s.Config("h2", "http/1.1")
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, cfg *tls.Config, url string) (int, string, *tls.ConnectionState, error) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.TLS, nil
}

func TestMutualTLS(t *testing.T) {
	ca, otherCA := testkit.NewCA(t, "ca"), testkit.NewCA(t, "other")
	dir := t.TempDir()
	f := writeServer(t, dir, ca.Issue(t, testkit.Leaf{CommonName: "sluice"}), ca)
	names, err := tlsauth.ParseNames([]string{"spiffe://cluster.local/ns/edge/sa/envoy"})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := tlsauth.NewServer(f, names, tlsauth.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	url := serveTLS(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }))

	right := ca.Issue(t, testkit.Leaf{Client: true, URIs: []string{"spiffe://cluster.local/ns/edge/sa/envoy"}})
	wrong := ca.Issue(t, testkit.Leaf{Client: true, URIs: []string{"spiffe://cluster.local/ns/web/sa/app"}, DNS: []string{"app.internal"}})
	foreign := otherCA.Issue(t, testkit.Leaf{Client: true, URIs: []string{"spiffe://cluster.local/ns/edge/sa/envoy"}})

	if _, _, _, err := get(t, testkit.ClientConfig(t, ca, nil), url); err == nil {
		t.Error("a client without a certificate was served")
	}
	if _, _, _, err := get(t, testkit.ClientConfig(t, ca, foreign), url); err == nil {
		t.Error("a client with a certificate of another CA was served")
	}
	code, body, _, err := get(t, testkit.ClientConfig(t, ca, wrong), url)
	if err != nil || code != http.StatusForbidden || !strings.Contains(body, "client_names") {
		t.Errorf("a client with a name not on the list: %d %q %v, want 403", code, body, err)
	}
	if !strings.Contains(logs.String(), "URI:spiffe://cluster.local/ns/web/sa/app") || !strings.Contains(logs.String(), "DNS:app.internal") {
		t.Errorf("the refusal's log line does not name the presented names:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "PRIVATE") {
		t.Errorf("the log holds key material:\n%s", logs.String())
	}
	code, body, cs, err := get(t, testkit.ClientConfig(t, ca, right), url)
	if err != nil || code != http.StatusOK || body != "HTTP/2.0" {
		t.Errorf("the allowed client: %d %q %v, want 200 over HTTP/2", code, body, err)
	}
	if cs != nil && cs.Version < tls.VersionTLS12 {
		t.Errorf("version %x", cs.Version)
	}
	old := testkit.ClientConfig(t, ca, right)
	old.MaxVersion = tls.VersionTLS11
	if _, _, _, err := get(t, old, url); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
}

// TestRotation replaces the files and checks that new connections get
// the new certificate once the files have settled, and that a broken
// replacement is refused, logged and kept out.
func TestRotation(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	dir := t.TempDir()
	first := ca.Issue(t, testkit.Leaf{CommonName: "one"})
	f := writeServer(t, dir, first, nil)
	var logs bytes.Buffer
	var loaded []string
	refused := 0
	s, err := tlsauth.NewServer(f, nil, tlsauth.Options{
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		OnLoad:   func(m *tlsauth.Material) { loaded = append(loaded, m.Serial()) },
		OnRefuse: func() { refused++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	url := serveTLS(t, s, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serial := func() string {
		_, _, cs, err := get(t, testkit.ClientConfig(t, ca, nil), url)
		if err != nil {
			t.Fatal(err)
		}
		return cs.PeerCertificates[0].SerialNumber.Text(16)
	}
	if got := serial(); got != first.Cert.SerialNumber.Text(16) {
		t.Fatalf("serial %s, want the first certificate's", got)
	}
	if s.Check(false) {
		t.Error("Check with unchanged files put new material in use")
	}

	second := ca.Issue(t, testkit.Leaf{CommonName: "two"})
	writeServer(t, dir, second, nil)
	if s.Check(false) {
		t.Error("the first Check after a change applied it before the files settled")
	}
	if !s.Check(false) {
		t.Fatal("the second Check did not apply the settled files")
	}
	if got := serial(); got != second.Cert.SerialNumber.Text(16) {
		t.Fatalf("serial %s after rotation, want the second certificate's", got)
	}

	// A key that belongs to another certificate: refused, logged once.
	third := ca.Issue(t, testkit.Leaf{CommonName: "three"})
	testkit.WriteCertFile(t, dir, "server.pem", third.CertPEM)
	for range 3 {
		if s.Check(false) {
			t.Fatal("a certificate with the wrong key was put in use")
		}
	}
	if n := strings.Count(logs.String(), "new TLS files refused"); n != 1 || s.Refusals() != 1 {
		t.Errorf("%d refusal log lines, %d refusals; want 1 and 1:\n%s", n, s.Refusals(), logs.String())
	}
	if got := serial(); got != second.Cert.SerialNumber.Text(16) {
		t.Fatalf("serial %s after a broken replacement, want the second certificate's still", got)
	}
	// An expired pair, forced (SIGHUP): refused too.
	expired := ca.Issue(t, testkit.Leaf{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	writeServer(t, dir, expired, nil)
	if s.Check(true) {
		t.Fatal("an expired certificate was put in use")
	}
	// Then the right key arrives: served.
	writeServer(t, dir, third, nil)
	if !s.Check(true) {
		t.Fatal("a good replacement after a broken one was not put in use")
	}
	if got := serial(); got != third.Cert.SerialNumber.Text(16) {
		t.Fatalf("serial %s, want the third certificate's", got)
	}
	want := []string{second.Cert.SerialNumber.Text(16), third.Cert.SerialNumber.Text(16)}
	if strings.Join(loaded, ",") != strings.Join(want, ",") {
		t.Errorf("OnLoad saw %q, want %q", loaded, want)
	}
	if refused != 2 {
		t.Errorf("OnRefuse called %d times, want 2 (the wrong key, the expired pair)", refused)
	}
}

// TestCARotation checks that a new client CA applies to new connections,
// session resumption included.
func TestCARotation(t *testing.T) {
	ca, next := testkit.NewCA(t, "ca"), testkit.NewCA(t, "next")
	dir := t.TempDir()
	f := writeServer(t, dir, ca.Issue(t, testkit.Leaf{}), ca)
	s, err := tlsauth.NewServer(f, nil, tlsauth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url := serveTLS(t, s, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	client := testkit.ClientConfig(t, ca, ca.Issue(t, testkit.Leaf{Client: true}))
	client.ClientSessionCache = tls.NewLRUClientSessionCache(8)
	if code, _, _, err := get(t, client, url); err != nil || code != 200 {
		t.Fatalf("before rotation: %d %v", code, err)
	}
	testkit.WriteCertFile(t, dir, "ca.pem", next.PEM)
	if !s.Check(true) {
		t.Fatal("the new CA was not put in use")
	}
	if _, _, _, err := get(t, client, url); err == nil {
		t.Error("a client of the removed CA was served after the rotation (a resumed session?)")
	}
	if code, _, _, err := get(t, testkit.ClientConfig(t, ca, next.Issue(t, testkit.Leaf{Client: true})), url); err != nil || code != 200 {
		t.Errorf("a client of the new CA: %d %v", code, err)
	}
}
