package config

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/service/tlsauth"
)

// Bounds on the admin token.
const (
	// MinTokenLen is the shortest admin token accepted: a token is a
	// secret, and a short one can be guessed.
	MinTokenLen = tlsauth.MinTokenLen
	// maxTokenFile is the largest admin token file read.
	maxTokenFile = 4 << 10
)

// listenAdmin decodes listen.admin into l, which holds listen.http and
// listen.grpc already.
func (d *decoder) listenAdmin(v *yaml.Node, l *Listen) {
	s, ok := d.addr(v, "listen.admin")
	if !ok {
		return
	}
	l.Admin = s
	if strings.HasSuffix(s, ":0") {
		return
	}
	switch s {
	case l.HTTP:
		d.add(deref(v), "listen.admin", "must differ from listen.http (%s); remove listen.admin to serve the admin endpoints there", l.HTTP)
	case l.GRPC:
		d.add(deref(v), "listen.admin", "must differ from listen.grpc (%s)", l.GRPC)
	}
}

// admin decodes the admin section. A token_file is read now, relative to
// the configuration file's directory, so that a missing or unreadable file
// is a problem of the configuration (and a reload reads it again).
func (d *decoder) admin(at, n *yaml.Node) Admin {
	var a Admin
	o, ok := d.mapping(at, n, "admin", "token", "token_file")
	if !ok {
		return a
	}
	tv, fv := o.get("token"), o.get("token_file")
	if tv != nil && fv != nil {
		d.add(o.fields["token_file"].key, "admin.token_file", "cannot be combined with admin.token; keep one (token_file keeps the secret out of this file)")
		return a
	}
	switch {
	case tv != nil:
		if s, ok := d.str(tv, "admin.token"); ok {
			if msg := checkToken(s); msg != "" {
				d.add(deref(tv), "admin.token", "%s", msg)
			} else {
				a.Token = s
			}
		}
	case fv != nil:
		path, ok := d.nonEmpty(fv, "admin.token_file")
		if !ok {
			return a
		}
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(d.file), path)
		}
		tok, msg := readToken(path)
		if msg != "" {
			d.add(deref(fv), "admin.token_file", "%s", msg)
			return a
		}
		a.Token, a.TokenFile = tok, path
	}
	return a
}

// readToken reads an admin token from the file at path; the token is the
// file's content without surrounding white space. It returns what is wrong
// instead, never quoting the file's content.
func readToken(path string) (string, string) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", "cannot read " + path + ": no such file"
		}
		return "", "cannot read the token: " + err.Error()
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	switch {
	case err != nil:
		return "", "cannot read the token: " + err.Error()
	case len(b) > maxTokenFile:
		return "", path + " is larger than 4 KiB; it should hold the token alone"
	}
	tok := string(bytes.TrimSpace(b))
	if msg := checkToken(tok); msg != "" {
		return "", path + ": the token " + msg
	}
	return tok, ""
}

// checkToken returns what is wrong with an admin token, or "": that of
// tlsauth.CheckToken (at least MinTokenLen visible ASCII characters, so
// that it can travel in an Authorization header unchanged), with advice
// for an empty one.
func checkToken(s string) string {
	if s == "" {
		return "is empty; write a secret of at least 16 characters, like the output of `openssl rand -hex 32`"
	}
	return tlsauth.CheckToken(s)
}
