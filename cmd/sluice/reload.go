package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/rls"
)

// source is what the configuration file was when last read, for the
// watcher to tell a change from none.
type source struct {
	info os.FileInfo
	sum  [32]byte
}

// readSource reads the configuration file at path (at most one byte more
// than config.MaxFileSize, so that Parse reports a file too large) and
// what it was when read. The file is examined before it is read, so a
// change while reading shows as a change later.
func readSource(path string) (*source, []byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, config.MaxFileSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	return &source{info: info, sum: sha256.Sum256(data)}, data, nil
}

// sameFile reports whether two looks at a file found it unchanged: the
// same file (device and inode: an editor or a Kubernetes ConfigMap that
// replaces the file by renaming counts as a change), size and
// modification time.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// watch reloads the configuration file on SIGHUP (hup) and, every
// --watch, when the file changed, until ctx is done. A change is applied
// once the file has stopped changing for one interval and is not empty,
// so that a file being written is not read half-way, and only when its
// content differs from what was last read. src is what the file was at startup; nil when
// the service runs the built-in default, which has no file to reload.
func (s *service) watch(ctx context.Context, src *source, hup <-chan os.Signal) {
	var tick <-chan time.Time
	if src != nil && s.flags.watch > 0 {
		t := time.NewTicker(s.flags.watch)
		defer t.Stop()
		tick = t.C
	}
	var pending os.FileInfo // a change seen on the last tick, settling
	missing := false        // the file was missing on the last tick
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			s.tls.check()
			if src == nil {
				s.logger.Info("SIGHUP: nothing to reload: the service runs the built-in default configuration")
				continue
			}
			pending = nil
			if next := s.reload("SIGHUP", src); next != nil {
				src = next
			}
		case <-tick:
			info, err := os.Stat(s.flags.config)
			if err != nil {
				if !missing {
					s.logger.Warn("cannot watch the configuration file; the running configuration stays", "file", s.flags.config, "error", err)
				}
				missing, pending = true, nil
				continue
			}
			missing = false
			if sameFile(info, src.info) {
				pending = nil
				continue
			}
			if pending == nil || !sameFile(info, pending) || info.Size() == 0 {
				// Wait one more interval for the file to settle. An empty
				// file is never valid: it is one being written (truncated,
				// not yet filled), so it waits for its content.
				pending = info
				continue
			}
			pending = nil
			if next := s.reload("file changed", src); next != nil {
				src = next
			}
		}
	}
}

// reload reads the configuration file and applies it unless its content
// is what src says was read last and the trigger is a file change. It
// returns what the file now is, or nil when it could not be read.
func (s *service) reload(trigger string, src *source) *source {
	next, data, err := readSource(s.flags.config)
	if err != nil {
		s.metrics.ReloadFailed()
		s.logger.Error("reload failed: cannot read the configuration file; the running configuration stays", "trigger", trigger, "error", err)
		return nil
	}
	if trigger != "SIGHUP" && next.sum == src.sum {
		s.logger.Debug("the configuration file was rewritten with the same content; nothing to reload", "file", s.flags.config)
		return next
	}
	s.apply(trigger, data)
	return next
}

// apply checks a new configuration file and, if it is valid, makes it the
// one in use. An invalid file changes nothing: each problem is logged.
func (s *service) apply(trigger string, data []byte) bool {
	log := s.logger.With("trigger", trigger, "file", s.flags.config)
	cfg, err := config.Parse(s.flags.config, data, formats)
	var envoy *rls.Config
	if err == nil {
		envoy, err = buildEnvoy(cfg)
	}
	if err != nil {
		s.metrics.ReloadFailed()
		var ce *config.Error
		if !errors.As(err, &ce) {
			log.Error("reload refused; the running configuration stays", "error", err)
			return false
		}
		for _, p := range ce.Problems {
			log.Error("configuration problem", "problem", p.String())
		}
		log.Error("reload refused; the running configuration stays", "problems", len(ce.Problems))
		return false
	}
	for _, setting := range s.restartRequired(cfg) {
		log.Warn("a changed setting needs a restart; it keeps its running value until then", "setting", setting)
	}
	tlsNext, err := s.tls.prepare(cfg)
	if err == nil {
		err = s.handler.Reload(cfg)
	}
	if err != nil {
		s.metrics.ReloadFailed()
		log.Error("reload refused; the running configuration stays", "error", err)
		return false
	}
	s.tls.commit(tlsNext)
	s.tokens.Store(cfg.Tokens())
	s.store.reportSplit(cfg, log)
	if s.rls != nil {
		s.rls.SetConfig(envoy)
	}
	log.LogAttrs(context.Background(), slog.LevelDebug, "reload applied")
	return true
}

// restartRequired lists the settings of cfg that differ from those the
// service started with and that only a restart applies. A listen address
// given by a flag is the flag's, whatever the file says.
func (s *service) restartRequired(cfg *config.Config) []string {
	out := config.RestartRequired(s.started, cfg)
	return slices.DeleteFunc(out, func(setting string) bool {
		return (setting == "listen.http" && s.flags.http != "") || (setting == "listen.grpc" && s.flags.grpc != "") ||
			(setting == "listen.admin" && s.flags.admin != "")
	})
}
