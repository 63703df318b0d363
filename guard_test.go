package sluice_test

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The shape of the module, as docs/architecture.md draws it. These tests
// read the packages with `go list` and fail when a change breaks a rule.

const module = "github.com/sluicehq/sluice"

// leaves are the stores and adapters: none of them imports another, only
// the root, the engine and the internal helpers of their own kind.
var leaves = []string{
	"httplimit", "grpclimit", "memstore", "redisstore", "plans",
	"internal/service/server", "internal/service/rls",
}

// knownEdges are the imports between leaves that exist today, each with
// its reason; a new one fails TestLeavesImportNoOtherLeaf. Remove an entry
// when its import goes.
var knownEdges = map[string]string{
	// The service composes the middleware (proxy, forward-auth and the
	// decision API's key functions and quota fields) and the plan tables.
	"internal/service/server -> httplimit": "the service mounts the middleware",
	"internal/service/server -> plans":     "plan tables of the service",
	// Envoy's response_headers carry the same IETF quota fields.
	"internal/service/rls -> httplimit": "the IETF quota fields for response_headers",
	// A per-IP limiter over a bounded memory store.
	"httplimit -> memstore": "httplimit.PerIP keeps its state in a bounded memstore",
	// The middleware applies plans (an adapter using a domain idea; plans
	// itself imports no adapter).
	"httplimit -> plans": "httplimit.PlanLimits applies a plans.Set",
}

// pkg is what `go list` says of one package.
type pkg struct {
	path    string // relative to the module, "" for the root
	dir     string
	imports []string // the module's packages it imports, relative
	all     []string // every package it imports, as import paths
	files   []string // its non-test Go files
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .Imports \" \"}}\t{{join .GoFiles \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var ps []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 4 {
			t.Fatalf("go list: unexpected line %q", sc.Text())
		}
		p := pkg{path: rel(f[0]), dir: f[1], files: strings.Fields(f[3])}
		p.all = strings.Fields(f[2])
		for _, imp := range p.all {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				p.imports = append(p.imports, rel(imp))
			}
		}
		ps = append(ps, p)
	}
	if len(ps) < 10 {
		t.Fatalf("go list found %d packages; the module has more", len(ps))
	}
	return ps
}

func rel(importPath string) string {
	return strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
}

// leafOf returns the leaf that p belongs to (a leaf or one of its
// subpackages), or "".
func leafOf(p string) string {
	for _, l := range leaves {
		if p == l || strings.HasPrefix(p, l+"/") {
			return l
		}
	}
	return ""
}

func TestAlgoImportsNothingOfTheModule(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.path == "internal/algo" && len(p.imports) > 0 {
			t.Errorf("internal/algo imports %v; the algorithms must stay pure", p.imports)
		}
	}
}

func TestLeavesImportNoOtherLeaf(t *testing.T) {
	for _, p := range listPackages(t) {
		from := leafOf(p.path)
		if from == "" {
			continue
		}
		for _, imp := range p.imports {
			to := leafOf(imp)
			if to == "" || to == from {
				continue
			}
			if _, ok := knownEdges[from+" -> "+to]; !ok {
				t.Errorf("%s imports %s: stores and adapters meet only through the root and internal/engine", p.path, imp)
			}
		}
	}
}

func TestOnlyCmdImportsServerAndRLS(t *testing.T) {
	for _, p := range listPackages(t) {
		if strings.HasPrefix(p.path, "cmd/") {
			continue
		}
		for _, imp := range p.imports {
			for _, inner := range []string{"internal/service/server", "internal/service/rls"} {
				if (imp == inner || strings.HasPrefix(imp, inner+"/")) && leafOf(p.path) != inner {
					t.Errorf("%s imports %s; only cmd/ wires the servers", p.path, imp)
				}
			}
		}
	}
}

// TestConfigIsASchema: internal/service/config decodes and validates the
// configuration file into plain data and builds nothing that serves
// requests, so it imports, of the module, only the root (policies,
// algorithms and their bounds: the core, which validates a policy in one
// place) and internal/service/tlsauth (it reads and checks the TLS and token files
// at load, so that a bad one is a problem of the file). Key functions,
// Envoy's descriptor trees, plan tables and the store are built by the
// packages that use them, or by cmd/; the formats those packages own are
// checked through config.Formats, which cmd/ passes.
func TestConfigIsASchema(t *testing.T) {
	allowed := []string{"", "internal/service/tlsauth"}
	found := false
	for _, p := range listPackages(t) {
		if p.path != "internal/service/config" {
			continue
		}
		found = true
		for _, imp := range p.imports {
			if !slices.Contains(allowed, imp) {
				t.Errorf("internal/service/config imports %s; the configuration is a schema: build in the package that uses it, or in cmd/", imp)
			}
		}
	}
	if !found {
		t.Error("go list did not find internal/service/config")
	}
}

// TestOnlyTheEngineCallsAllowAll: Store.AllowAll, the all-or-nothing
// seam, is called by the engine (and the root's Limiter), by the stores,
// by the conformance suite, and by store decorators that forward it from
// their own AllowAll method; every front door decides through the engine.
func TestOnlyTheEngineCallsAllowAll(t *testing.T) {
	allowed := []string{"", "internal/engine", "memstore", "redisstore", "sluicetest"}
	fset := token.NewFileSet()
	for _, p := range listPackages(t) {
		if slices.Contains(allowed, p.path) {
			continue
		}
		for _, name := range p.files {
			f, err := parser.ParseFile(fset, filepath.Join(p.dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil || fn.Name.Name == "AllowAll" {
					continue // a decorator's AllowAll forwards the call
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					if call, ok := n.(*ast.CallExpr); ok {
						if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "AllowAll" {
							t.Errorf("%s: %s calls AllowAll; decide through internal/engine", fset.Position(call.Pos()), fn.Name.Name)
						}
					}
					return true
				})
			}
		}
	}
}

// TestRedisClientsOnlyWhereTheyBelong: Redis clients are built in cmd/ and
// used by the packages whose job is Redis (the store, the plan tables and
// overrides kept in Redis, the test server); the HTTP service and the
// front doors only see them through those.
func TestRedisClientsOnlyWhereTheyBelong(t *testing.T) {
	allowed := []string{"redisstore", "plans/redisplans", "internal/service/overrides", "internal/testkit"}
	for _, p := range listPackages(t) {
		if strings.HasPrefix(p.path, "cmd/") || slices.Contains(allowed, p.path) {
			continue
		}
		if slices.Contains(p.all, "github.com/redis/rueidis") {
			t.Errorf("%s imports rueidis; Redis clients are wired in cmd/", p.path)
		}
	}
}

// place returns the layer of the tree a package belongs to, as
// docs/architecture.md draws it: "library" (the root, the core, the
// stores and the doors), "service" (what sluice serve runs, and
// simulate), "command" (cmd/), "suite" (the black-box suites in test/)
// or "helper" (the test and benchmark helpers).
func place(p string) string {
	switch {
	case strings.HasPrefix(p, "cmd/"):
		return "command"
	case strings.HasPrefix(p, "test/"):
		return "suite"
	case slices.Contains(testHelpers, p):
		return "helper"
	case strings.HasPrefix(p, "internal/service/") || p == "internal/simulate":
		return "service"
	}
	return "library"
}

// testHelpers are the packages that only tests and benchmarks import.
var testHelpers = []string{
	"internal/testkit", "internal/teststore",
}

// mayImport lists, for each place, the places its non-test files may
// import: imports point inward, from the command to the service to the
// library, and nothing but tests imports a helper.
var mayImport = map[string][]string{
	"library": {"library"},
	"service": {"library", "service"},
	"command": {"library", "service", "command"},
	"helper":  {"library", "service", "helper"},
	"suite":   {"library", "service", "helper", "suite"},
}

func TestImportsPointInward(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range listPackages(t) {
		from := place(p.path)
		seen[p.path] = true
		for _, imp := range p.imports {
			if to := place(imp); !slices.Contains(mayImport[from], to) {
				t.Errorf("%s (%s) imports %s (%s); imports point inward: command -> service -> library", p.path, from, imp, to)
			}
		}
	}
	for _, h := range testHelpers {
		if !seen[h] {
			t.Errorf("go list does not find the test helper %s: update testHelpers", h)
		}
	}
}

// TestControlPlaneOnlyInTheService: go-control-plane's server, cache and
// xDS types (its root module and its ratelimit module) serve the xDS
// client of sluice serve --envoy-env and the management server of its
// tests; a program that imports the library never downloads them.
func TestControlPlaneOnlyInTheService(t *testing.T) {
	for _, p := range listPackages(t) {
		if place(p.path) != "library" {
			continue
		}
		for _, dep := range p.all {
			if strings.HasPrefix(dep, "github.com/envoyproxy/go-control-plane/pkg/") ||
				strings.HasPrefix(dep, "github.com/envoyproxy/go-control-plane/ratelimit/") {
				t.Errorf("%s depends on %s; go-control-plane's server and xDS resources belong to the service and its tests", p.path, dep)
			}
		}
	}
}

// TestLibraryNeedsNoTracingSDK: a program that imports Sluice's library
// (the root, the stores, the doors, plans) builds none of OpenTelemetry:
// the SDK and its exporters are the service's (internal/service/tracing),
// and the library takes no hook of OpenTelemetry's API either, so that
// a library user who does not trace compiles none of it
// (docs/architecture.md, "Tracing").
func TestLibraryNeedsNoTracingSDK(t *testing.T) {
	var lib []string
	for _, p := range listPackages(t) {
		if place(p.path) == "library" {
			lib = append(lib, module+strings.TrimSuffix("/"+p.path, "/"))
		}
	}
	if len(lib) == 0 {
		t.Fatal("no library package found")
	}
	out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, lib...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(dep, "go.opentelemetry.io/") {
			t.Errorf("the library depends on %s; OpenTelemetry belongs to the service (internal/service/tracing)", dep)
		}
	}
	// And the service does use it, where this test says.
	out, err = exec.Command("go", "list", "-deps", module+"/internal/service/tracing").Output()
	if err != nil || !strings.Contains(string(out), "go.opentelemetry.io/otel/sdk/trace") {
		t.Errorf("internal/service/tracing does not build the SDK (%v): the test above checks nothing", err)
	}
}
