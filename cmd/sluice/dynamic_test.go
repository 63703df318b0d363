package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestOpenTable: sluice serve opens a plan table file, picks up a changed
// file and keeps the previous one when a changed file is refused, logging
// both; a Redis hash needs the Redis backend.
func TestOpenTable(t *testing.T) {
	// In a bubble, the table looks at its file by the fake clock that
	// the Sleeps below move.
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		d := openDynamic(config.Store{Backend: config.MemoryBackend}, slog.New(slog.NewTextHandler(&logs, nil)))
		defer d.close()
		d.tableCheck = time.Millisecond
		path := filepath.Join(t.TempDir(), "customers.csv")
		if err := os.WriteFile(path, []byte("k-pro,pro\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		table, err := d.openTable(config.PlanTable{Name: "customers", File: path}, []string{"free", "pro"})
		if err != nil {
			t.Fatal(err)
		}
		plan := func(key string) string {
			t.Helper()
			p, _, err := table.Plan(t.Context(), key)
			if err != nil {
				t.Fatalf("Plan(%q): %v", key, err)
			}
			return p
		}
		if got := plan("k-pro"); got != "pro" {
			t.Errorf("k-pro: plan %q, want pro", got)
		}
		// Each change gets a later modification time, so that the table sees
		// it whatever the file system's time resolution.
		change := func(body string, at time.Time) {
			t.Helper()
			testkit.WriteFileAt(t, path, body, at)
			time.Sleep(d.tableCheck) // the next look
		}
		change("k-new,free\n", time.Now().Add(time.Minute))
		if got := plan("k-new"); got != "free" {
			t.Errorf("k-new after the change: plan %q, want free", got)
		}
		change("k-new,gold\n", time.Now().Add(2*time.Minute))
		if got := plan("k-new"); got != "free" {
			t.Errorf("k-new after a refused file: plan %q, want free (the previous table)", got)
		}
		testkit.WantAll(t, "logs", logs.String(), `msg="plans: plan table reloaded" table=customers keys=1`, `msg="plans: a changed plan table file was refused; the previous one stays" table=customers`, `no plan named \"gold\"`)
		if _, err := d.openTable(config.PlanTable{Name: "accounts", RedisHash: "plans"}, nil); err == nil || !strings.Contains(err.Error(), `the Redis hash "plans" needs store.backend: redis`) {
			t.Errorf("a Redis hash with the memory backend: %v, want an error", err)
		}
	})
}
