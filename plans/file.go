package plans

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize is the largest table file a File reads: 64 MiB.
const MaxFileSize = 64 << 20

// FileOptions configure a File. The zero value is valid.
type FileOptions struct {
	// CheckEvery, when positive, makes Plan look at the file's size and
	// modification time at most this often (the first lookup after the
	// interval does, on the caller's goroutine) and reload it when they
	// changed. Zero means the file is read only by OpenFile and Reload.
	CheckEvery time.Duration
	// Plans, when not empty, lists the plan names a file may use: a line
	// naming another plan is an error, and the file is refused.
	Plans []string
	// OnReload, when set, is called after every attempt to reload a
	// changed file: with the number of keys of the new table, or with the
	// error that kept the old one in use.
	OnReload func(keys int, err error)
	// Now returns the current time; default time.Now.
	Now func() time.Time
}

// File is a Table read from a file of client keys and plan names, CSV or
// YAML by its extension:
//
//	# customers.csv: key,plan; a first line "key,plan" is a header
//	key,plan
//	k-1234,pro
//	k-5678,free
//
//	# customers.yaml: a mapping of keys to plans
//	k-1234: pro
//	k-5678: free
//
// A key may appear once. A File is re-read when it changes (see
// FileOptions.CheckEvery, and Reload); a file that cannot be read or
// parsed is refused and the table in use stays. It is safe for concurrent
// use.
type File struct {
	path     string
	every    time.Duration
	known    []string
	onReload func(int, error)
	now      func() time.Time

	table atomic.Pointer[fileTable]
	next  atomic.Int64 // Unix nanoseconds of the next lazy check
	mu    sync.Mutex   // serialises reloads
	// tried is the file as last read, whether or not it was good, so that
	// a broken file is read and reported once, not at every check.
	tried os.FileInfo
	// missing reports that the file could not be found at the last look.
	missing bool
}

type fileTable struct {
	plans map[string]string
	info  os.FileInfo
}

var _ Table = (*File)(nil)

// OpenFile reads the table file at path.
func OpenFile(path string, opts FileOptions) (*File, error) {
	f := &File{path: path, every: opts.CheckEvery, known: slices.Clone(opts.Plans), onReload: opts.OnReload, now: opts.Now}
	if f.now == nil {
		f.now = time.Now
	}
	t, err := f.read()
	if err != nil {
		return nil, err
	}
	f.table.Store(t)
	f.tried = t.info
	f.next.Store(f.now().Add(f.every).UnixNano())
	return f, nil
}

// sameFile reports whether a and b describe the same file with the same
// size and modification time.
func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// Path returns the file's path.
func (f *File) Path() string { return f.path }

// Len returns the number of keys in the table in use.
func (f *File) Len() int { return len(f.table.Load().plans) }

// Plan returns the plan of key. With CheckEvery set, it first reloads the
// file if it is time to look and the file changed; a reload that fails
// keeps the old table and is reported to OnReload, not here.
func (f *File) Plan(_ context.Context, key string) (string, bool, error) {
	if f.every > 0 {
		now := f.now().UnixNano()
		if next := f.next.Load(); now >= next && f.next.CompareAndSwap(next, now+int64(f.every)) {
			f.Reload()
		}
	}
	p, ok := f.table.Load().plans[key]
	return p, ok, nil
}

// Reload re-reads the file if its size, modification time or identity
// changed since it was read, and reports whether it did. On an error the
// table in use stays.
func (f *File) Reload() (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := os.Stat(f.path)
	if err == nil && sameFile(info, f.tried) {
		return false, nil
	}
	if err != nil && f.missing {
		return false, fmt.Errorf("plans: %w", err) // reported already
	}
	f.missing = err != nil
	t, err := f.read()
	if err == nil {
		f.table.Store(t)
		f.tried = t.info
	} else {
		f.tried = info // nil when the file is missing: look again next time
	}
	if f.onReload != nil {
		n := 0
		if t != nil {
			n = len(t.plans)
		}
		f.onReload(n, err)
	}
	return err == nil, err
}

// read reads and parses the file.
func (f *File) read() (*fileTable, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, fmt.Errorf("plans: %w", err)
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("plans: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("plans: read %s: %w", f.path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("plans: %s is larger than %d bytes", f.path, MaxFileSize)
	}
	m, err := ParseTable(f.path, data, f.known)
	if err != nil {
		return nil, err
	}
	return &fileTable{plans: m, info: info}, nil
}

// ParseTable parses a table file's content: YAML when name ends in .yaml
// or .yml, CSV otherwise. known, when not empty, lists the plan names the
// table may use. Errors name the file and the line.
func ParseTable(name string, data []byte, known []string) (map[string]string, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml":
		return parseYAMLTable(name, data, known)
	}
	return parseCSVTable(name, data, known)
}

func checkEntry(name string, line int, key, plan string, seen map[string]int, known []string) error {
	switch {
	case key == "":
		return fmt.Errorf("plans: %s:%d: the key is empty", name, line)
	case plan == "":
		return fmt.Errorf("plans: %s:%d: key %q has no plan", name, line, key)
	case len(known) > 0 && !slices.Contains(known, plan):
		return fmt.Errorf("plans: %s:%d: key %q: no plan named %q (want one of %s)", name, line, key, plan, strings.Join(known, ", "))
	}
	if first, dup := seen[key]; dup {
		return fmt.Errorf("plans: %s:%d: key %q is already given a plan on line %d", name, line, key, first)
	}
	seen[key] = line
	return nil
}

func parseCSVTable(name string, data []byte, known []string) (map[string]string, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.Comment = '#'
	r.FieldsPerRecord = 2
	r.TrimLeadingSpace = true
	out := make(map[string]string)
	seen := make(map[string]int)
	first := true
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("plans: %s:%d: %v (want two columns: key,plan)", name, pe.Line, pe.Err)
			}
			return nil, fmt.Errorf("plans: %s: %w", name, err)
		}
		line, _ := r.FieldPos(0)
		key, plan := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1])
		if first && strings.EqualFold(key, "key") && strings.EqualFold(plan, "plan") {
			first = false
			continue // the header
		}
		first = false
		if err := checkEntry(name, line, key, plan, seen, known); err != nil {
			return nil, err
		}
		out[key] = plan
	}
}

func parseYAMLTable(name string, data []byte, known []string) (map[string]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("plans: %s: invalid YAML: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	out := make(map[string]string)
	if len(doc.Content) == 0 {
		return out, nil // an empty file: no keys
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return out, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("plans: %s:%d: want a mapping of keys to plan names", name, root.Line)
	}
	seen := make(map[string]int)
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			return nil, fmt.Errorf("plans: %s:%d: want key: plan, with a plan name as a plain string", name, k.Line)
		}
		if err := checkEntry(name, k.Line, k.Value, v.Value, seen, known); err != nil {
			return nil, err
		}
		out[k.Value] = v.Value
	}
	return out, nil
}
