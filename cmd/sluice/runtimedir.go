package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/rls"
)

// runtimeFile is one file of envoyproxy/ratelimit's runtime directory.
type runtimeFile struct {
	path string
	data []byte
}

// readRuntimeDir reads every file under dir, in the order of their paths,
// as envoyproxy/ratelimit's runtime loader does: in every folder below
// dir, whatever the files' names; symbolic links to files are followed
// (a Kubernetes ConfigMap's files are links into its ..data folder), links
// to folders are not; with ignoreDot, files and folders whose names start
// with "." are left out (the ConfigMap's ..data and its timestamped
// folders among them). It returns the files and a digest of their names
// and contents.
func readRuntimeDir(dir string, ignoreDot bool) ([]runtimeFile, [32]byte, error) {
	var files []runtimeFile
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		if ignoreDot && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		info, err := os.Stat(path) // follows a link
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, config.MaxFileSize+1))
		if err != nil {
			return err
		}
		if total += int64(len(data)); total > config.MaxFileSize {
			return fmt.Errorf("the files under %s hold more than %d bytes", dir, config.MaxFileSize)
		}
		files = append(files, runtimeFile{path: path, data: data})
		return nil
	})
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("runtime directory: %w", err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s\n%d:", len(f.path), f.path, len(f.data))
		h.Write(f.data)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return files, sum, nil
}

// envoyOptions are the settings of the environment that shape how the
// rate limit configuration is compiled.
type envoyOptions struct {
	// headers asks for the reference's rate limit headers
	// (LIMIT_RESPONSE_HEADERS_ENABLED), named headerNames.
	headers     bool
	headerNames [3]string
	// countRefused, shadowAll, quotaAll, dynamicMetadata: rls.Section's
	// CountRefused, ShadowAll, QuotaAll and DynamicMetadata.
	countRefused, shadowAll, quotaAll, dynamicMetadata bool
	// merge joins the descriptors of a domain given by several sources
	// (MERGE_DOMAIN_CONFIG); without it, that is a problem.
	merge bool
}

// namedDomains is one source of domain documents: a file of the runtime
// directory, or one RateLimitConfig resource received over xDS.
type namedDomains struct {
	name    string
	domains []rls.Domain
}

// compileDomains checks the domains of every source together, as one
// configuration (a domain given by two sources is a problem naming both),
// and compiles them. Problems name their source (file:line: path:
// message).
func compileDomains(sources []namedDomains, opts envoyOptions) (*rls.Config, error) {
	var all []rls.Domain
	seen := map[string]string{}
	at := map[string]int{}
	var problems []config.Problem
	for _, s := range sources {
		for _, d := range s.domains {
			if i, ok := at[d.Domain]; ok && opts.merge {
				// As the reference merges: the descriptors of every
				// source under one domain; a key and value given twice is
				// then a problem, as in one file.
				all[i].Descriptors = append(all[i].Descriptors, d.Descriptors...)
				continue
			}
			if first, ok := seen[d.Domain]; ok {
				problems = append(problems, config.Problem{File: s.name, Path: "domain",
					Message: fmt.Sprintf("domain %q is also configured in %s; a domain is configured once", d.Domain, first)})
				continue
			}
			seen[d.Domain] = s.name
			at[d.Domain] = len(all)
			all = append(all, d)
		}
	}
	if len(problems) > 0 {
		return nil, &config.Error{Problems: problems}
	}
	sec := rls.Section{Domains: all, CountRefused: opts.countRefused, ShadowAll: opts.shadowAll, QuotaAll: opts.quotaAll, DynamicMetadata: opts.dynamicMetadata,
		HeaderNames: rls.HeaderNames{Limit: opts.headerNames[0], Remaining: opts.headerNames[1], Reset: opts.headerNames[2]}}
	if opts.headers {
		sec.ResponseHeaders = rls.ResponseHeadersReference
	}
	cfg, err := rls.CompileSection(sec)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseRuntimeFiles parses each file as envoyproxy/ratelimit's domain
// documents, strictly as the envoy section is parsed; problems name the
// file and line.
func parseRuntimeFiles(files []runtimeFile) ([]namedDomains, error) {
	var out []namedDomains
	var problems []config.Problem
	for _, f := range files {
		domains, ps := rls.Parse(f.data, "")
		for _, p := range ps {
			problems = append(problems, config.Problem{File: f.path, Line: p.Line, Column: p.Column,
				Path: strings.TrimPrefix(p.Path, "."), Message: p.Message})
		}
		out = append(out, namedDomains{name: f.path, domains: domains})
	}
	if len(problems) > 0 {
		return nil, &config.Error{Problems: problems}
	}
	return out, nil
}

// loadRuntimeDir reads, checks and compiles the runtime directory's
// files; it returns the configuration and the digest of what it read
// (set even when the files have problems, so that the watcher does not
// report them again until they change).
func loadRuntimeDir(dir string, ignoreDot bool, opts envoyOptions) (*rls.Config, [32]byte, error) {
	files, sum, err := readRuntimeDir(dir, ignoreDot)
	if err != nil {
		return nil, sum, err
	}
	sources, err := parseRuntimeFiles(files)
	if err != nil {
		return nil, sum, err
	}
	cfg, err := compileDomains(sources, opts)
	return cfg, sum, err
}
