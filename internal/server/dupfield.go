package server

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// duplicateField returns the path of the first field that appears twice in
// one object of the JSON document b (such as `key` or `checks[1].cost`),
// or "" if none does. Names are compared as encoding/json matches them to
// struct fields, ignoring case: {"key":"a","Key":"b"} names key twice.
// encoding/json itself keeps the last value of a repeated field, so a body
// such as {"limit":"a","key":"a","key":"b"} would be decided for a key the
// client may not have meant. b must be valid JSON; for anything else
// duplicateField returns "" and leaves the complaint to the decoder.
func duplicateField(b []byte) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	path, _ := dupValue(dec, "")
	return path
}

// dupValue reads one value from dec; path names it in messages. It
// returns the path of a repeated field, and false when dec failed.
func dupValue(dec *json.Decoder, path string) (string, bool) {
	tok, err := dec.Token()
	if err != nil {
		return "", false
	}
	switch tok {
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
			for _, s := range seen {
				if strings.EqualFold(s, name) {
					return field, true
				}
			}
			seen = append(seen, name)
			if dup, ok := dupValue(dec, field); dup != "" || !ok {
				return dup, ok
			}
		}
		_, err = dec.Token() // '}'
		return "", err == nil
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if dup, ok := dupValue(dec, path+"["+strconv.Itoa(i)+"]"); dup != "" || !ok {
				return dup, ok
			}
		}
		_, err = dec.Token() // ']'
		return "", err == nil
	}
	return "", true
}
