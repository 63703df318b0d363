package server

import (
	"unicode/utf8"
)

// fastCheck parses the commonest body of POST /v1/check, one check such as
// {"limit":"api-key","key":"k1","cost":1}, without encoding/json. It
// accepts only bodies whose meaning is beyond doubt: one object holding
// "limit" and "key" (strings of valid UTF-8 without escapes or control
// characters) and optionally "cost" (digits, no sign, no leading zero, at
// most 18), each once, in any order, with JSON white space around tokens and
// nothing after the object. For those, encoding/json decodes the same
// values (FuzzFastCheck checks it); every other body, valid or not, makes
// ok false and goes to encoding/json, which says what is wrong with it.
//
// limit is a slice of b: the limit is looked up by name without a copy of
// it.
func fastCheck(b []byte) (limit []byte, key string, cost int64, hasCost, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return
	}
	var seenLimit, seenKey bool
	for {
		i = skipSpace(b, i+1)
		name, j, good := fastString(b, i)
		if !good {
			return
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return
		}
		i = skipSpace(b, i+1)
		switch name {
		case "limit", "key":
			s, j, good := fastBytes(b, i)
			if !good {
				return
			}
			if name == "limit" {
				if seenLimit {
					return
				}
				limit, seenLimit = s, true
			} else {
				if seenKey {
					return
				}
				key, seenKey = string(s), true
			}
			i = j
		case "cost":
			if hasCost {
				return
			}
			n, j, good := fastDigits(b, i)
			if !good {
				return
			}
			cost, hasCost, i = n, true, j
		default:
			return
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return
		}
		if b[i] == '}' {
			break
		}
		if b[i] != ',' {
			return
		}
	}
	if skipSpace(b, i+1) != len(b) || !seenLimit || !seenKey {
		return nil, "", 0, false, false
	}
	return limit, key, cost, hasCost, true
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// fastString reads a JSON string at b[i] that needs no unescaping: valid
// UTF-8, no backslash, no control character. It returns the string and the
// index after its closing quote.
func fastString(b []byte, i int) (string, int, bool) {
	s, j, ok := fastBytes(b, i)
	return string(s), j, ok
}

// fastBytes is fastString returning the string's bytes, a slice of b.
func fastBytes(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	start := i + 1
	for j := start; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[start:j]
			if !utf8.Valid(s) {
				return nil, 0, false
			}
			return s, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// fastDigits reads a JSON number at b[i] that is a plain positive integer
// of at most 18 digits without a leading zero.
func fastDigits(b []byte, i int) (int64, int, bool) {
	var n int64
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		n = n*10 + int64(b[j]-'0')
		j++
	}
	if j == i || j-i > 18 || (b[i] == '0' && j-i > 1) {
		return 0, 0, false
	}
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, 0, false
	}
	return n, j, true
}
