package memstore_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestConformance(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return memstore.New(memstore.Options{})
	})
}
