package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// usageBody is the body of POST /v1/charge and POST /v1/refund: the units
// (cost) to charge to, or give back to, one key of one limit.
type usageBody struct {
	Limit *string `json:"limit"`
	Key   *string `json:"key"`
	Cost  *int64  `json:"cost"`
}

// readUsage reads and validates the body of a charge or a refund (op
// names it in messages) and applies the runtime overrides.
func (h *Handler) readUsage(w http.ResponseWriter, r *http.Request, st *state, op string) (item, *requestError) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return item{}, bodyError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var b usageBody
	if err := dec.Decode(&b); err != nil {
		rerr := bodyError(err)
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			rerr = badRequest("unknown field %s (want limit, key and cost)", f)
		}
		return item{}, rerr
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return item{}, badRequest("the body holds more than one JSON value")
	}
	if msg := fieldProblem(raw); msg != "" {
		return item{}, badRequest("%s", msg)
	}
	if b.Limit == nil && b.Key == nil && b.Cost == nil {
		return item{}, badRequest(`the body must hold "limit", "key" and "cost": the units to %s`, op)
	}
	it, rerr := checkOne(st.cfg, "", b.Limit, b.Key, b.Cost)
	if rerr != nil {
		return item{}, rerr
	}
	switch {
	case b.Cost == nil:
		return item{}, badRequest("cost is missing: the units to %s", op)
	case *b.Cost == 0:
		return item{}, badRequest("cost must be at least 1, got 0: there is nothing to %s", op)
	}
	it.limit.Policy, it.override = h.resolver.Policy(it.limit.Policy, it.key)
	return it, nil
}

// releaseBody is the body of POST /v1/release: a lease, and the usage of
// the limits whose estimates it settles, by the limit's name.
type releaseBody struct {
	Lease *string           `json:"lease"`
	Usage *map[string]int64 `json:"usage"`
}

// release is a validated release: the store's lease and, for each result
// of the check that made it, the usage that settles its estimate, or -1
// to keep the estimate (nil: keep them all).
type release struct {
	lease string
	usage []int64
}

// readRelease reads the body of POST /v1/release, answering 400 itself
// when it is not {"lease": "<lease>"} with an optional "usage": an object
// of whole numbers of at least 0, each naming a limit of which the lease
// holds an estimate.
func readRelease(w http.ResponseWriter, r *http.Request) (release, bool) {
	fail := func(format string, args ...any) (release, bool) {
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf(format, args...))
		return release{}, false
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLeaseBody))
	if err != nil {
		return fail("%s", bodyError(err).msg)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var b releaseBody
	if err := dec.Decode(&b); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fail("unknown field %s (want lease and usage)", f)
		}
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field == "usage" && typ.Type.Kind() == reflect.Int64 && numberRange(typ) == "" {
			// A limit's usage of the wrong type (encoding/json names the
			// map, not its member).
			return fail("usage: each limit's usage must be a whole number, not %s", typ.Value)
		}
		return fail("%s", bodyError(err).msg)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fail("the body must hold one JSON object")
	}
	if msg := fieldProblem(raw, "usage"); msg != "" {
		return fail("%s", msg)
	}
	if b.Lease == nil || *b.Lease == "" {
		return fail(`missing lease: send {"lease": "<the lease of an admitted check>"}`)
	}
	storeLease, names, ok := decodeUsageLease(*b.Lease)
	if !ok {
		return fail("the lease is not one this Sluice made (malformed)")
	}
	rel := release{lease: storeLease}
	if b.Usage == nil {
		return rel, true
	}
	usage := *b.Usage
	if len(names) == 0 && len(usage) > 0 {
		return fail(`usage: the lease holds no estimate to settle (it was made without "lease": true); release it without usage`)
	}
	for name, n := range usage {
		if n < 0 {
			return fail("usage.%s must be 0 or more, got %d", name, n)
		}
	}
	rel.usage = make([]int64, len(names))
	for i := range rel.usage {
		rel.usage[i] = -1
	}
	for name, n := range usage {
		found := false
		for i, held := range names {
			if held == name && name != "" {
				rel.usage[i], found = n, true
			}
		}
		if !found {
			return fail("usage.%s: the lease holds no estimate of limit %q (it holds %s)", name, name, heldNames(names))
		}
	}
	return rel, true
}

// heldNames lists the names of a lease's estimates for a message.
func heldNames(names []string) string {
	var out []string
	for _, n := range names {
		if n != "" {
			out = append(out, fmt.Sprintf("%q", n))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
