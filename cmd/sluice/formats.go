package main

import (
	"errors"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/rls"
	"github.com/sluicehq/sluice/internal/service/usage"
	"github.com/sluicehq/sluice/plans"
	"github.com/sluicehq/sluice/redisstore"
)

// formats are the checks of the configuration values whose format
// belongs to a package other than config: config.Parse calls them while it
// walks a file, so that validate, serve and a reload report their
// problems with the others, at their place.
var formats = config.Formats{
	KeySource: func(spec string) error {
		_, err := httplimit.ParseKey(spec, &httplimit.KeyOptions{Sources: httplimit.BodySources(nil)})
		return err
	},
	Envoy: func(section *yaml.Node, path string) []config.Problem {
		_, problems := decodeEnvoy(section, path)
		return problems
	},
	PlanTable: func(file string, data []byte, names []string) error {
		_, err := plans.ParseTable(file, data, names)
		if err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), "plans: "))
		}
		return nil
	},
	RedisPrefix: redisstore.CheckPrefix,
	Usage: func(spec string) error {
		_, err := usage.Parse(spec)
		return err
	},
}

// decodeEnvoy reads and compiles the envoy section, the YAML node of its
// value, with package rls; it returns the problems of a section that
// cannot be compiled, with their places.
func decodeEnvoy(section *yaml.Node, path string) (*rls.Config, []config.Problem) {
	s, ps := rls.DecodeSection(section, path)
	if len(ps) == 0 {
		cfg, err := rls.CompileSection(s)
		if err == nil {
			return cfg, nil
		}
		// DecodeSection validates as CompileSection does; keep what it
		// says all the same.
		return nil, []config.Problem{{Path: path, Message: err.Error()}}
	}
	out := make([]config.Problem, len(ps))
	for i, p := range ps {
		out[i] = config.Problem{Line: p.Line, Column: p.Column, Path: p.Path, Message: p.Message}
	}
	return nil, out
}

// buildEnvoy returns the descriptors of Envoy's rate limit service that
// cfg configures; nil when it has no envoy section. cfg was checked with
// formats, so an error is unexpected; it lists the problems, with their
// places in the file.
func buildEnvoy(cfg *config.Config) (*rls.Config, error) {
	section, ok := cfg.Envoy()
	if !ok {
		return nil, nil
	}
	envoy, problems := decodeEnvoy(section, "envoy")
	if len(problems) > 0 {
		for i := range problems {
			problems[i].File = cfg.Source()
		}
		return nil, &config.Error{Problems: problems}
	}
	return envoy, nil
}
