package usage

import "math"

// Field is one count of an OpenAI-compatible usage object.
type Field int

// The counts of an OpenAI-compatible response's usage object.
const (
	// Total is usage.total_tokens.
	Total Field = iota
	// Prompt is usage.prompt_tokens.
	Prompt
	// Completion is usage.completion_tokens.
	Completion
	numFields
)

// fieldNames are the members of the usage object, by Field.
var fieldNames = [numFields]string{"total_tokens", "prompt_tokens", "completion_tokens"}

// String returns the field's member name in the usage object.
func (f Field) String() string {
	if f < 0 || f >= numFields {
		return "unknown"
	}
	return fieldNames[f]
}

// maxDepth is the deepest nesting the scanner accepts, as encoding/json
// does: a document nested deeper is invalid.
const maxDepth = 10000

// maxKey is the longest member name the scanner compares; longer names
// are none of the ones it looks for.
const maxKey = 24

// count is what a document says of one field of its usage object.
type count struct {
	state countState
	n     int64
}

type countState uint8

const (
	absent   countState = iota // no such member
	reported                   // a non-negative integer, in n
	bad                        // a member whose value is not a non-negative integer
)

// jsonScanner reads one JSON document a byte at a time, keeping
// nothing of it but its nesting (a bit per level) and what it needs of
// the current token, and records the integer members of the top-level
// object's "usage" object: usage.total_tokens, usage.prompt_tokens and
// usage.completion_tokens.
//
// It accepts exactly the documents encoding/json accepts (json.Valid),
// nesting included, and reads them as decoding the document into
// map[string]json.RawMessage would: member names are compared after
// their escapes are decoded, exactly (case matters), and when a name
// repeats the last member counts. Its memory does not grow with the
// document, but for one bit per level of nesting.
//
// The zero jsonScanner is ready for a document; reset makes it ready for
// another.
type jsonScanner struct {
	st    scanState
	depth int
	// kinds has a bit per open container, set for an object; the bit of
	// level d (1 is the top-level value) is bit (d-1)%64 of word (d-1)/64.
	kinds []uint64
	// lit is what is left to read of a literal (true, false, null).
	lit string
	// hex counts the hex digits of a \u escape, code is their value.
	hex, code int
	// The member name being read, when it is one the scanner compares
	// (keyWanted): at most maxKey bytes of it, decoded, and whether it
	// can still match (not longer, no byte outside ASCII).
	inKey     bool
	keyWanted bool
	keyBuf    [maxKey]byte
	keyLen    int
	keyBad    bool
	// pending is what the value being read (or about to be) means:
	// pendUsage for the top-level object's "usage" member, a Field+1 for
	// a member of the usage object, 0 otherwise.
	pending int
	// num is the value of the integer being read for a field; numBad
	// that it is not a non-negative integer that fits an int64.
	num    int64
	numBad bool
	// inUsage: the object open at level 2 is the usage object.
	inUsage bool
	// usage: the last usage member's counts; usageClosed, that its object
	// was read to its end; usageSeen, that a usage member was found.
	usage       [numFields]count
	usageSeen   bool
	usageClosed bool
}

// pendUsage marks the value of the top-level "usage" member.
const pendUsage = -1

type scanState uint8

const (
	sValue      scanState = iota // a value, after optional whitespace
	sValueOrEnd                  // after '[': a value or ']'
	sKeyOrEnd                    // after '{': a name or '}'
	sKey                         // after ',' in an object: a name
	sColon                       // after a name
	sAfter                       // after a value: ',' or the closer, or the end
	sString                      // inside a string
	sEscape                      // after '\' in a string
	sUnicode                     // inside a \u escape
	sLit                         // inside a literal
	sMinus                       // after '-'
	sZero                        // after a leading 0
	sInt                         // in the integer digits
	sDot                         // after '.'
	sFrac                        // in the fraction digits
	sE                           // after 'e' or 'E'
	sESign                       // after the exponent's sign
	sExp                         // in the exponent digits
	sDone                        // after the top-level value: whitespace only
	sError                       // not JSON
)

// reset makes s ready for a new document, keeping its nesting's memory.
func (s *jsonScanner) reset() {
	kinds := s.kinds[:0]
	*s = jsonScanner{kinds: kinds}
}

// failed reports whether what was read is not the start of a JSON
// document.
func (s *jsonScanner) failed() bool { return s.st == sError }

// complete reports whether a whole JSON document has been read (only
// whitespace may follow).
func (s *jsonScanner) complete() bool { return s.st == sDone }

// write reads p.
func (s *jsonScanner) write(p []byte) {
	for i := 0; i < len(p) && s.st != sError; i++ {
		s.step(p[i])
	}
}

// finish reads the end of the document: a top-level number ends there.
// It reports whether the document is complete and valid.
func (s *jsonScanner) finish() bool {
	if s.depth == 0 && s.isNumberEnd() {
		s.endNumber()
		s.st = sDone
	}
	return s.st == sDone
}

// isNumberEnd reports whether a number may end in the current state.
func (s *jsonScanner) isNumberEnd() bool {
	switch s.st {
	case sZero, sInt, sFrac, sExp:
		return true
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// step reads one byte.
func (s *jsonScanner) step(c byte) {
	switch s.st {
	case sValue:
		if !isSpace(c) {
			s.value(c)
		}
	case sValueOrEnd:
		switch {
		case isSpace(c):
		case c == ']':
			s.close(false)
		default:
			s.value(c)
		}
	case sKeyOrEnd:
		switch {
		case isSpace(c):
		case c == '}':
			s.close(true)
		case c == '"':
			s.startKey()
		default:
			s.st = sError
		}
	case sKey:
		switch {
		case isSpace(c):
		case c == '"':
			s.startKey()
		default:
			s.st = sError
		}
	case sColon:
		switch {
		case isSpace(c):
		case c == ':':
			s.st = sValue
		default:
			s.st = sError
		}
	case sAfter:
		s.after(c)
	case sString:
		switch {
		case c == '"':
			s.endString()
		case c == '\\':
			s.st = sEscape
		case c < 0x20:
			s.st = sError
		default:
			s.keyByte(c)
		}
	case sEscape:
		s.st = sString
		switch c {
		case '"', '\\', '/':
			s.keyByte(c)
		case 'b':
			s.keyByte('\b')
		case 'f':
			s.keyByte('\f')
		case 'n':
			s.keyByte('\n')
		case 'r':
			s.keyByte('\r')
		case 't':
			s.keyByte('\t')
		case 'u':
			s.st, s.hex, s.code = sUnicode, 0, 0
		default:
			s.st = sError
		}
	case sUnicode:
		v := unhex(c)
		if v < 0 {
			s.st = sError
			return
		}
		s.code = s.code<<4 | v
		if s.hex++; s.hex == 4 {
			s.st = sString
			if s.code < 0x80 {
				s.keyByte(byte(s.code))
			} else {
				s.keyBad = true
			}
		}
	case sLit:
		if c != s.lit[0] {
			s.st = sError
			return
		}
		if s.lit = s.lit[1:]; s.lit == "" {
			s.endValue()
		}
	case sMinus:
		switch {
		case c == '0':
			s.st = sZero
		case c >= '1' && c <= '9':
			s.st = sInt
		default:
			s.st = sError
		}
	case sZero:
		s.afterInt(c)
	case sInt:
		if c >= '0' && c <= '9' {
			s.digit(c)
			return
		}
		s.afterInt(c)
	case sDot:
		if c >= '0' && c <= '9' {
			s.st = sFrac
			return
		}
		s.st = sError
	case sFrac:
		switch {
		case c >= '0' && c <= '9':
		case c == 'e' || c == 'E':
			s.st = sE
		default:
			s.endNumber()
			s.after(c)
		}
	case sE:
		switch {
		case c == '+' || c == '-':
			s.st = sESign
		case c >= '0' && c <= '9':
			s.st = sExp
		default:
			s.st = sError
		}
	case sESign:
		if c >= '0' && c <= '9' {
			s.st = sExp
			return
		}
		s.st = sError
	case sExp:
		if c < '0' || c > '9' {
			s.endNumber()
			s.after(c)
		}
	case sDone:
		if !isSpace(c) {
			s.st = sError
		}
	}
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// value reads the first byte of a value.
func (s *jsonScanner) value(c byte) {
	if s.pending > 0 && c != '-' && (c < '0' || c > '9') {
		// A field of the usage object that is not a number.
		s.usage[s.pending-1] = count{state: bad}
		s.pending = 0
	}
	if s.pending == pendUsage {
		// The last usage member counts: forget an earlier one.
		s.usage, s.usageSeen, s.usageClosed = [numFields]count{}, false, false
		if c == '{' {
			s.usageSeen, s.inUsage = true, true
		}
		s.pending = 0
	}
	switch {
	case c == '{':
		s.open(true)
	case c == '[':
		s.open(false)
	case c == '"':
		s.st, s.inKey, s.keyWanted = sString, false, false
	case c == 't':
		s.st, s.lit = sLit, "rue"
	case c == 'f':
		s.st, s.lit = sLit, "alse"
	case c == 'n':
		s.st, s.lit = sLit, "ull"
	case c == '-':
		s.st, s.numBad = sMinus, true
	case c == '0':
		s.st, s.num, s.numBad = sZero, 0, false
	case c >= '1' && c <= '9':
		s.st, s.num, s.numBad = sInt, int64(c-'0'), false
	default:
		s.st = sError
	}
}

// digit reads a further digit of an integer part.
func (s *jsonScanner) digit(c byte) {
	d := int64(c - '0')
	if s.num > (math.MaxInt64-d)/10 {
		s.numBad = true
		return
	}
	s.num = s.num*10 + d
}

// afterInt reads the byte after an integer part.
func (s *jsonScanner) afterInt(c byte) {
	switch {
	case c == '.':
		s.st, s.numBad = sDot, true
	case c == 'e' || c == 'E':
		s.st, s.numBad = sE, true
	case c >= '0' && c <= '9':
		s.st = sError // a leading zero
	default:
		s.endNumber()
		s.after(c)
	}
}

// endNumber records the number just read, if it is a field's.
func (s *jsonScanner) endNumber() {
	if s.pending > 0 {
		if s.numBad {
			s.usage[s.pending-1] = count{state: bad}
		} else {
			s.usage[s.pending-1] = count{state: reported, n: s.num}
		}
	}
	s.endValue()
}

// open pushes a container.
func (s *jsonScanner) open(object bool) {
	if s.depth == maxDepth {
		s.st = sError
		return
	}
	w, b := s.depth/64, uint(s.depth%64)
	for len(s.kinds) <= w {
		s.kinds = append(s.kinds, 0)
	}
	if object {
		s.kinds[w] |= 1 << b
		s.st = sKeyOrEnd
	} else {
		s.kinds[w] &^= 1 << b
		s.st = sValueOrEnd
	}
	s.depth++
}

// object reports whether the innermost open container is an object.
func (s *jsonScanner) object() bool {
	d := s.depth - 1
	return s.kinds[d/64]&(1<<uint(d%64)) != 0
}

// close pops the innermost container, an object or not.
func (s *jsonScanner) close(object bool) {
	if s.depth == 0 || s.object() != object {
		s.st = sError
		return
	}
	if s.depth == 2 && s.inUsage {
		s.inUsage, s.usageClosed = false, true
	}
	s.depth--
	s.endValue()
}

// endValue moves on after a value.
func (s *jsonScanner) endValue() {
	s.pending = 0
	if s.depth == 0 {
		s.st = sDone
		return
	}
	s.st = sAfter
}

// after reads the byte after a value.
func (s *jsonScanner) after(c byte) {
	if s.depth == 0 {
		s.st = sDone
		s.step(c)
		return
	}
	switch {
	case isSpace(c):
		s.st = sAfter
	case c == ',':
		if s.object() {
			s.st = sKey
		} else {
			s.st = sValue
		}
	case c == '}':
		s.close(true)
	case c == ']':
		s.close(false)
	default:
		s.st = sError
	}
}

// startKey starts reading a member name.
func (s *jsonScanner) startKey() {
	s.st, s.inKey = sString, true
	s.keyWanted = s.depth == 1 || s.depth == 2 && s.inUsage
	s.keyLen, s.keyBad = 0, false
}

// keyByte adds a decoded byte to the member name being read.
func (s *jsonScanner) keyByte(c byte) {
	if !s.keyWanted || s.keyBad {
		return
	}
	if s.keyLen == maxKey || c >= 0x80 {
		s.keyBad = true
		return
	}
	s.keyBuf[s.keyLen] = c
	s.keyLen++
}

// endString ends a string: a value, or a member name before its colon.
func (s *jsonScanner) endString() {
	if !s.inKey {
		s.endValue()
		return
	}
	s.inKey = false
	s.st = sColon
	if !s.keyWanted || s.keyBad {
		return
	}
	if s.depth == 1 {
		if s.keyIs("usage") {
			s.pending = pendUsage
		}
		return
	}
	for f, name := range fieldNames {
		if s.keyIs(name) {
			s.pending = f + 1
		}
	}
}

// keyIs reports whether the member name just read is name.
func (s *jsonScanner) keyIs(name string) bool {
	return string(s.keyBuf[:s.keyLen]) == name
}
