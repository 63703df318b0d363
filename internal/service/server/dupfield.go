package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// decodeBody decodes raw, a whole request body, into v as the API reads
// every body: an unknown field (want names the fields v takes), anything
// after the JSON value and what fieldProblem refuses are 400s, and a body
// that is not JSON of v's shape is bodyError's answer.
func decodeBody(raw []byte, v any, want string) *requestError {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return badRequest("unknown field %s (want %s)", f, want)
		}
		return bodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("the body holds more than one JSON value")
	}
	if msg := fieldProblem(raw); msg != "" {
		return badRequest("%s", msg)
	}
	return nil
}

// fieldProblem returns what is wrong with the field names or null values
// of the JSON document b that encoding/json lets pass, or "" if nothing
// is. encoding/json matches names to struct fields ignoring case (and
// folds some non-ASCII letters, such as the Kelvin sign, to ASCII ones),
// keeps the last value of a field given twice, and reads null as absent.
// A gateway or firewall that inspects the same body may read it
// otherwise, so the decision API accepts only one reading:
//
//   - every field name is exact: lower-case ASCII letters, digits and
//     '_', as the API's fields are; {"LIMIT":"a"} is refused;
//   - no field appears twice in one object, such as `key` or
//     `checks[1].cost`;
//   - no field is null: a field left out takes its default, and null is
//     refused rather than read as either.
//
// b must be valid JSON that encoding/json decoded with
// DisallowUnknownFields; for anything else fieldProblem returns "" and
// leaves the complaint to the decoder.
//
// The members of the objects at the paths data (such as "usage") are
// data, named by the client (limit names): any name is theirs, but none
// may appear twice and none be null.
func fieldProblem(b []byte, data ...string) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	msg, _ := fieldValue(dec, "", data)
	return msg
}

// fieldValue reads one value from dec; path names it in messages. It
// returns fieldProblem's message, and false when dec failed.
func fieldValue(dec *json.Decoder, path string, data []string) (string, bool) {
	tok, err := dec.Token()
	if err != nil {
		return "", false
	}
	switch tok {
	case nil:
		if path != "" {
			return fmt.Sprintf("%s is null: give a value, or leave the field out for its default", path), true
		}
	case json.Delim('{'):
		var seen []string
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return "", false
			}
			name, _ := tok.(string)
			field := name
			if path != "" {
				field = path + "." + name
			}
			if !exactName(name) && !slices.Contains(data, path) {
				return fmt.Sprintf("unknown field %q: field names are matched exactly, in lower case (%s)", field, strings.ToLower(name)), true
			}
			for _, s := range seen {
				if s == name {
					return fmt.Sprintf("%s is given twice; each field may appear only once", field), true
				}
			}
			seen = append(seen, name)
			if msg, ok := fieldValue(dec, field, data); msg != "" || !ok {
				return msg, ok
			}
		}
		_, err = dec.Token() // '}'
		return "", err == nil
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if msg, ok := fieldValue(dec, path+"["+strconv.Itoa(i)+"]", data); msg != "" || !ok {
				return msg, ok
			}
		}
		_, err = dec.Token() // ']'
		return "", err == nil
	}
	return "", true
}

// exactName reports whether name is made of lower-case ASCII letters,
// digits and '_' alone, as every field of the API's bodies is: such a
// name that encoding/json matched to a field is that field's own.
func exactName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return name != ""
}
