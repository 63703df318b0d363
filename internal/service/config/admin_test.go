package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestAdmin(t *testing.T) {
	c := loadGood(t, "admin")
	if got, want := c.Listen(), (Listen{HTTP: "127.0.0.1:8080", Admin: "127.0.0.1:9090"}); got != want {
		t.Errorf("Listen() = %+v, want %+v", got, want)
	}
	want := Admin{Token: "sluice-test-admin-token-0123456789", TokenFile: filepath.Join("testdata", "good", "admin-token")}
	if got := c.Admin(); got != want {
		t.Errorf("Admin() = %+v, want %+v", got, want)
	}

	inline, err := Parse("inline.yaml", []byte("admin: {token: abcdefghijklmnopqrstuvwxyz}\n"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := inline.Admin(), (Admin{Token: "abcdefghijklmnopqrstuvwxyz"}); got != want {
		t.Errorf("Admin() = %+v, want %+v", got, want)
	}
	if got := inline.Listen().Admin; got != "" {
		t.Errorf("Listen().Admin = %q, want empty", got)
	}
	if got, want := RestartRequired(inline, c), []string{"listen.admin"}; !slices.Equal(got, want) {
		t.Errorf("RestartRequired = %v, want %v", got, want)
	}
}

// TestAdminTokenFile checks that a token file is read afresh by each
// Parse, so that a reload picks up a rotated token, and that an empty one
// is refused without quoting it.
func TestAdminTokenFile(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	tokPath := filepath.Join(dir, "token")
	data := []byte("admin: {token_file: token}\n")
	for _, tok := range []string{"first-token-0123456789", "second-token-0123456789"} {
		if err := os.WriteFile(tokPath, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Parse(cfgPath, data, testFormats)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Admin().Token; got != tok {
			t.Errorf("Admin().Token = %q, want %q", got, tok)
		}
	}
	if err := os.WriteFile(tokPath, []byte("  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Parse(cfgPath, data, testFormats)
	want := []string{cfgPath + ":1: admin.token_file: " + tokPath + ": the token is empty; write a secret of at least 16 characters, like the output of `openssl rand -hex 32`"}
	if got := problems(err); !slices.Equal(got, want) {
		t.Errorf("Parse with an empty token file: %q, want %q", got, want)
	}
}
