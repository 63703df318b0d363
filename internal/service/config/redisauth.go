package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// maxSecretFile is the largest password or certificate file read.
const maxSecretFile = 1 << 20

// RedisTLS is store.redis.tls: how Sluice connects to Redis over TLS.
type RedisTLS struct {
	// CAFile, CertFile and KeyFile are the files named in the
	// configuration, resolved against its directory; ServerName the name
	// the server's certificate must carry (default: the host of the
	// address).
	CAFile, CertFile, KeyFile, ServerName string
	// Config is built from the files when the configuration is loaded.
	Config *tls.Config
}

// redisAuth decodes the authentication and TLS fields of store.redis into
// r. Files are read now, relative to the configuration file's directory,
// so that a missing or unreadable one is a problem of the configuration.
func (d *decoder) redisAuth(o object, r *Redis) {
	d.secret(o, "store.redis", r)
	if v := o.get("tls"); v != nil {
		r.TLS = d.redisTLS(o.fields["tls"].key, v)
	}
	if v := o.get("sentinel"); v != nil {
		r.Sentinel = d.redisSentinel(o.fields["sentinel"].key, v)
	}
}

// redisSentinel decodes store.redis.sentinel: master_set, and the
// sentinels' own username and password or password_file.
func (d *decoder) redisSentinel(at, v *yaml.Node) *RedisSentinel {
	const path = "store.redis.sentinel"
	o, ok := d.mapping(at, v, path, "master_set", "username", "password", "password_file")
	if !ok {
		return nil
	}
	var auth Redis
	d.secret(o, path, &auth)
	mv := o.get("master_set")
	if mv == nil {
		d.add(o.at, path+".master_set", "missing: the name the sentinels monitor the master under (sentinel monitor NAME ...)")
		return nil
	}
	name, ok := d.nonEmpty(mv, path+".master_set")
	if !ok {
		return nil
	}
	return &RedisSentinel{MasterSet: name, Username: auth.Username, Password: auth.Password}
}

// secret decodes username, password and password_file of the mapping o
// at path into r's Username, Password and PasswordFile.
func (d *decoder) secret(o object, path string, r *Redis) {
	if v := o.get("username"); v != nil {
		if s, ok := d.nonEmpty(v, path+".username"); ok {
			r.Username = s
		}
	}
	pv, fv := o.get("password"), o.get("password_file")
	switch {
	case pv != nil && fv != nil:
		d.add(o.fields["password_file"].key, path+".password_file", "cannot be combined with %s.password; keep one (password_file keeps the secret out of this file)", path)
	case pv != nil:
		if s, ok := d.nonEmpty(pv, path+".password"); ok {
			r.Password = s
		}
	case fv != nil:
		if file, ok := d.nonEmpty(fv, path+".password_file"); ok {
			file = d.relative(file)
			b, msg := readSecretFile(file)
			if msg == "" && len(bytes.TrimSpace(b)) == 0 {
				msg = file + " is empty; it should hold the password"
			}
			if msg != "" {
				d.add(deref(fv), path+".password_file", "%s", msg)
			} else {
				r.Password, r.PasswordFile = string(bytes.TrimSpace(b)), file
			}
		}
	}
	if r.Username != "" && r.Password == "" {
		d.add(o.fields["username"].key, path+".username", "needs %s.password or password_file", path)
	}
}

// redisTLS decodes store.redis.tls: true (TLS with the system's roots) or a
// mapping of ca_file, cert_file, key_file and server_name. It returns nil
// for false or a problem.
func (d *decoder) redisTLS(at, v *yaml.Node) *RedisTLS {
	const path = "store.redis.tls"
	if n := deref(v); n.Kind == yaml.ScalarNode {
		on, ok := d.boolean(n, path)
		if !ok || !on {
			return nil
		}
		return &RedisTLS{Config: &tls.Config{MinVersion: tls.VersionTLS12}}
	}
	o, ok := d.mapping(at, v, path, "ca_file", "cert_file", "key_file", "server_name")
	if !ok {
		return nil
	}
	t := &RedisTLS{Config: &tls.Config{MinVersion: tls.VersionTLS12}}
	bad := false
	file := func(key string) string {
		f, ok := d.filePath(o, path, key)
		bad = bad || !ok
		return f
	}
	t.CAFile, t.CertFile, t.KeyFile = file("ca_file"), file("cert_file"), file("key_file")
	if sv := o.get("server_name"); sv != nil {
		if s, ok := d.nonEmpty(sv, path+".server_name"); ok {
			t.ServerName, t.Config.ServerName = s, s
		} else {
			bad = true
		}
	}
	if t.CAFile != "" {
		b, msg := readSecretFile(t.CAFile)
		pool := x509.NewCertPool()
		if msg == "" && !pool.AppendCertsFromPEM(b) {
			msg = t.CAFile + " holds no PEM certificate"
		}
		if msg != "" {
			d.add(deref(o.get("ca_file")), path+".ca_file", "%s", msg)
			bad = true
		}
		t.Config.RootCAs = pool
	}
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		if o.get("cert_file") != nil || o.get("key_file") != nil {
			d.add(o.at, path, "cert_file and key_file go together: a client certificate needs its key")
			bad = true
		}
	case t.CertFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			d.add(deref(o.get("cert_file")), path+".cert_file", "cannot use the client certificate: %v", err)
			bad = true
		}
		t.Config.Certificates = []tls.Certificate{cert}
	}
	if bad {
		return nil
	}
	return t
}

// relative resolves path against the configuration file's directory.
func (d *decoder) relative(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(filepath.Dir(d.file), path)
}

// readSecretFile reads a file of at most maxSecretFile bytes, returning
// what is wrong instead, never quoting its content.
func readSecretFile(path string) ([]byte, string) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "cannot read " + path + ": no such file"
		}
		return nil, "cannot read " + path + ": " + err.Error()
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	switch {
	case err != nil:
		return nil, "cannot read " + path + ": " + err.Error()
	case len(b) > maxSecretFile:
		return nil, path + " is larger than 1 MiB"
	}
	return b, ""
}
