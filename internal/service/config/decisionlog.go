package config

import (
	"bytes"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// DecisionLog is the decision_log section: the decision log of sluice
// serve (docs/operations.md, "Decision log and replay"). Each key means
// what its --decision-log flag means, and a flag given on the command
// line wins over its key.
type DecisionLog struct {
	// Path is the file written, relative to the configuration file's
	// folder unless absolute (path).
	Path string
	// Sample is the share of keys whose decisions are written, in (0, 1];
	// 0 when not set, which means 1 (sample).
	Sample float64
	// KeyFile is the file of the secret that keys are hashed under,
	// resolved as Path is, and Key the secret, read at load; empty when
	// keys are written as they are (key_file).
	KeyFile string
	Key     []byte
	// MaxSizeMiB rotates the file at this many MiB; 0 when not set, which
	// means 100 (max_size_mib).
	MaxSizeMiB int64
	// Files is how many rotated files are kept; 0 when not set, which
	// means 5 (files).
	Files int
}

// minDecisionLogKey is the shortest secret that hashes a decision log's
// keys, in bytes.
const minDecisionLogKey = 16

// DecisionLog returns the decision_log section, or nil when the file has
// none.
func (c *Config) DecisionLog() *DecisionLog { return copyOf(c.decisionLog) }

// decisionLogSection decodes the decision_log section. Its key_file is
// read now, so that a missing file or a short secret is a problem of the
// configuration.
func (d *decoder) decisionLogSection(at, n *yaml.Node) *DecisionLog {
	l := &DecisionLog{}
	o, ok := d.mapping(at, n, "decision_log", "path", "sample", "key_file", "max_size_mib", "files")
	if !ok {
		return l
	}
	if v := o.get("path"); v == nil {
		d.add(at, "decision_log.path", "is required: the file the decisions are written to, like /var/log/sluice/decisions.jsonl")
	} else if s, ok := d.nonEmpty(v, "decision_log.path"); ok {
		l.Path = d.relative(s)
	}
	if v := o.get("sample"); v != nil {
		v = deref(v)
		r, err := strconv.ParseFloat(v.Value, 64)
		if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!float" && v.ShortTag() != "!!int") || err != nil || !(r > 0 && r <= 1) {
			d.add(v, "decision_log.sample", "must be a number greater than 0 and at most 1 (0.1 writes the decisions of a tenth of the keys), got %s", describe(v))
		} else {
			l.Sample = r
		}
	}
	if path, ok := d.filePath(o, "decision_log", "key_file"); ok && path != "" {
		b, msg := readSecretFile(path)
		key := bytes.TrimSpace(b)
		switch {
		case msg != "":
			d.add(deref(o.get("key_file")), "decision_log.key_file", "%s", msg)
		case len(key) < minDecisionLogKey:
			d.add(deref(o.get("key_file")), "decision_log.key_file", "the secret in %s is %d bytes, want at least %d", path, len(key), minDecisionLogKey)
		default:
			l.KeyFile, l.Key = path, key
		}
	}
	if v := o.get("max_size_mib"); v != nil {
		if n, ok := d.integer(v, "decision_log.max_size_mib", 1, 1<<20); ok {
			l.MaxSizeMiB = n
		}
	}
	if v := o.get("files"); v != nil {
		if n, ok := d.integer(v, "decision_log.files", 1, 1000); ok {
			l.Files = int(n)
		}
	}
	return l
}

// decisionLogKey is what of a decision_log section a restart must apply:
// all of it, the secret as its bytes.
func decisionLogKey(l *DecisionLog) [6]string {
	return [6]string{l.Path, strconv.FormatFloat(l.Sample, 'g', -1, 64), l.KeyFile, string(l.Key), strconv.FormatInt(l.MaxSizeMiB, 10), strconv.Itoa(l.Files)}
}
