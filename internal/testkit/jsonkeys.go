package testkit

import (
	"encoding/json"
	"strings"
	"testing"
)

// JSONKeys returns the names of the members of the JSON object in line,
// in the order they appear (a map loses it); it fails t if line is not
// one JSON object.
func JSONKeys(t testing.TB, line string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q: want an object, got %v, %v", line, tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
	}
	return keys
}
