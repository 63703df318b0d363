package server

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// leaseBody is the body of POST /v1/release and POST /v1/renew.
type leaseBody struct {
	Lease *string `json:"lease"`
}

// maxLeaseBody bounds the body of a release or a renewal: a lease names
// at most a few dozen keys.
const maxLeaseBody = 16 << 10

// readLease decodes the body of a release or a renewal, answering 400
// itself when it is not {"lease": "<lease>"}.
func readLease(w http.ResponseWriter, r *http.Request) (string, bool) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxLeaseBody))
	dec.DisallowUnknownFields()
	var b leaseBody
	if err := dec.Decode(&b); err != nil {
		msg := bodyError(err).msg
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			msg = "unknown field " + f + " (want lease)"
		}
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", msg)
		return "", false
	}
	if dec.More() {
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", "the body must hold one JSON object")
		return "", false
	}
	if b.Lease == nil || *b.Lease == "" {
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", `missing lease: send {"lease": "<the lease of an admitted check>"}`)
		return "", false
	}
	return *b.Lease, true
}

// leaseError answers a lease the store refused: malformed or not made by
// this store (400), expired or released (404 for a renewal), or a store
// failure (503).
func (h *Handler) leaseError(w http.ResponseWriter, r *http.Request, op string, err error) {
	switch {
	case errors.Is(err, sluice.ErrInvalidLease):
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", "the lease is not one this Sluice made (malformed, or from another store): "+err.Error())
	case errors.Is(err, sluice.ErrLeaseExpired):
		writeProblemJSON(w, http.StatusNotFound, "Not Found", "the lease holds nothing any more: it expired or was released; check again to take a new one")
	default:
		if n, ok := h.storeErrLog.allow(time.Now(), storeErrorLogEvery); ok {
			h.logger.LogAttrs(r.Context(), slog.LevelWarn, op+": store failed", slog.Any("error", err), slog.Int("failures_not_logged", n))
		}
		writeProblemJSON(w, http.StatusServiceUnavailable, "Service Unavailable", "the store failed to "+op+" the lease; see the server's log")
	}
}

// serveRelease answers POST /v1/release: {"lease": "..."} frees what the
// lease of an admitted check holds, and {"lease": "...", "usage":
// {"<limit>": N}} also settles its estimates with the usage of each limit
// named. {"released": false} for a lease released already, expired or
// past its settlement, which is not an error and changes nothing.
func (h *Handler) serveRelease(w http.ResponseWriter, r *http.Request) {
	rel, ok := readRelease(w, r)
	if !ok {
		return
	}
	released, err := h.store.Release(r.Context(), time.Time{}, rel.lease, rel.usage)
	if err != nil {
		h.leaseError(w, r, "release", err)
		return
	}
	h.metrics.LeaseReleased(released)
	writeJSON(w, http.StatusOK, map[string]bool{"released": released})
}

// serveRenew answers POST /v1/renew: {"lease": "..."} extends what the
// lease holds by its limits' leases, and answers the time until the first
// expires, {"lease_expires_in_ms": N}; 404 for a lease that holds nothing
// any more.
func (h *Handler) serveRenew(w http.ResponseWriter, r *http.Request) {
	lease, ok := readLease(w, r)
	if !ok {
		return
	}
	// A lease with estimates renews the holds of the store's lease in it.
	lease, _, ok = decodeUsageLease(lease)
	if !ok {
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", "the lease is not one this Sluice made (malformed)")
		return
	}
	in, err := h.store.Renew(r.Context(), time.Time{}, lease)
	if errors.Is(err, sluice.ErrLeaseExpired) {
		h.metrics.LeaseRenewed(false)
	}
	if err != nil {
		h.leaseError(w, r, "renew", err)
		return
	}
	h.metrics.LeaseRenewed(true)
	writeJSON(w, http.StatusOK, map[string]int64{"lease_expires_in_ms": int64(in / time.Millisecond)})
}
