package envoycompat

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// invalid is a configuration that envoyproxy/ratelimit refuses, written
// for this suite, and what `sluice validate` must say of it: the problem
// at want (LINE: PATH: and the start of the message). Its envoy section is
// testdata/invalid/NAME.yaml, to which the test appends the listeners.
type invalid struct {
	name string
	ref  string // the reference's fixture and test
	want []string
}

// invalids are every configuration mistake of the reference's
// test/config fixtures that its config_test.go refuses, each as the
// envoy section of a sluice.yaml.
var invalids = []invalid{
	{"empty-domain", "test/config/empty_domain.yaml, TestEmptyDomain (\"config file cannot have empty domain\")", []string{"2: envoy[0].domain: domain is required"}},
	{"duplicate-domain", "test/config/duplicate_domain.yaml, TestDuplicateDomain (\"duplicate domain 'test-domain' in config file\")", []string{"6: envoy[1].domain: duplicate domain \"edge\""}},
	{"empty-key", "test/config/empty_key.yaml, TestEmptyKey (\"descriptor has empty key\")", []string{"4: envoy[0].descriptors[0].key: key is required"}},
	{"duplicate-key", "test/config/duplicate_key.yaml, TestDuplicateKey (\"duplicate descriptor composite key\")", []string{"7: envoy[0].descriptors[1]: duplicate descriptor key \"tier\" with value \"gold\""}},
	{"duplicate-key-nested", "test/config/config_test.go TestDuplicateKeyDomainMerge (the same composite key twice, below a value)", []string{"9: envoy[0].descriptors[0].descriptors[1]: duplicate descriptor key \"user\" without a value"}},
	{"bad-limit-unit", "test/config/bad_limit_unit.yaml, TestBadLimitUnit (\"invalid rate limit unit 'foo'\")", []string{"5: envoy[0].descriptors[0].rate_limit.unit: unknown unit \"fortnight\""}},
	{"replaces-self", "test/config/replaces_self.yaml, TestReplacesSelf (\"replaces should not contain name of same descriptor\")", []string{"9: envoy[0].descriptors[0].rate_limit.replaces[0].name: a limit cannot replace itself"}},
	{"replaces-empty", "test/config/replaces_empty.yaml, TestReplacesEmpty (\"should not have an empty replaces entry\")", []string{"8: envoy[0].descriptors[0].rate_limit.replaces[0].name: replaces entry needs a name"}},
	{"bad-yaml", "test/config/bad_yaml.yaml, TestBadYaml (\"error loading config file: yaml: ...\")", []string{"3: invalid YAML"}},
	{"misspelled-key", "test/config/misspelled_key.yaml, TestMisspelledKey (\"unknown key 'ratelimit'\")", []string{"5: envoy[0].descriptors[0].ratelimit: unknown key \"ratelimit\""}},
	{"misspelled-key-2", "test/config/misspelled_key2.yaml, TestMisspelledKey (\"unknown key 'requestsperunit'\")", []string{"5: envoy[0].descriptors[0].rate_limit.requestsperunit: unknown key \"requestsperunit\""}},
	{"non-string-key", "test/config/non_string_key.yaml, TestNonStringKey (\"key is not of type string: 0.25\")", []string{"8: envoy[0].descriptors[0].rate_limit.0.25: unknown key \"0.25\""}},
	{"non-map-list", "test/config/non_map_list.yaml, TestNonMapList (\"list of type other than map: a\")", []string{"4: envoy[0].descriptors[0]: want a mapping, got \"just-a-word\""}},
	{"unlimited-with-unit", "test/config/unlimited_with_unit.yaml, TestUnlimitedWithRateLimitUnit (\"should not specify rate limit unit when unlimited\")", []string{"5: envoy[0].descriptors[0].rate_limit.unit: unit must not be set when unlimited is true"}},
	{"zero-unit-multiplier", "test/config/zero_unit_multiplier.yaml (a unit_multiplier of 0)", []string{"5: envoy[0].descriptors[0].rate_limit.unit_multiplier: unit_multiplier must be at least 1"}},
	{"share-threshold-without-wildcard", "config_impl.go loadDescriptors (\"share_threshold can only be used with wildcard values\")", []string{"6: envoy[0].descriptors[0].share_threshold: share_threshold needs a wildcard value"}},
}

// TestInvalidConfigurations runs `sluice validate` on each configuration
// the reference refuses: it must fail (exit status 1) and name the file,
// line and path of the problem.
func TestInvalidConfigurations(t *testing.T) {
	bin := testkit.Sluice(t)
	dir := t.TempDir()
	for _, c := range append(invalids, stricter...) {
		t.Run(c.name, func(t *testing.T) {
			cfg := fixture(t, "invalid", c.name) + "listen: {http: \"127.0.0.1:0\", grpc: \"127.0.0.1:0\"}\n"
			path := testkit.WriteFile(t, filepath.Join(dir, c.name+".yaml"), cfg)
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, "validate", path)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("sluice validate = %v (stdout %q), want exit status 1", err, stdout.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), path+":"+w) {
					t.Errorf("sluice validate said\n%s\nwant a line with %s%s", stderr.String(), path+":", w)
				}
			}
		})
	}
}

// stricter are configurations that envoyproxy/ratelimit loads but that
// Sluice refuses, because it would not treat them the same (the
// configuration entries of docs/envoy.md's list of differences).
var stricter = []invalid{
	{"missing-requests-per-unit", "config_impl.go YamlRateLimit (a missing requests_per_unit is read as 0)", []string{"5: envoy[0].descriptors[0].rate_limit.requests_per_unit: requests_per_unit is required"}},
	{"replaces-unknown-name", "config_impl.go loadDescriptors (replaces names are not checked)", []string{"8: envoy[0].descriptors[0].rate_limit.replaces[0].name: no rate limit in this domain is named \"nobody\""}},
	{"quota-mode-without-limit", "config_impl.go loadDescriptors (quota_mode on a descriptor without rate_limit is loaded and does nothing)", []string{"5: envoy[0].descriptors[0].quota_mode: quota_mode is set but the descriptor has no rate_limit that counts"}},
	{"period-too-long", "src/utils UnitToDivider with unit_multiplier (any multiple of a unit)", []string{"5: envoy[0].descriptors[0].rate_limit.unit_multiplier: the period, unit_multiplier 11 × year, is longer than 10 years"}},
}
