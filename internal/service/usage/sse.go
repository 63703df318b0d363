package usage

// sseScanner reads a server-sent event stream (the WHATWG HTML
// standard's text/event-stream) a byte at a time and keeps the usage of
// the last event whose data is a JSON object with a usage object, until
// an event whose data is [DONE] ends it. It keeps nothing of an event but
// what jsonScanner keeps of its data, read as it arrives: lines may end
// in CRLF, LF or CR, a leading byte order mark is skipped, comments and
// fields other than data are ignored, the data lines of one event are
// joined with LF, and an event is dispatched by an empty line (a last
// event without one is discarded, as the standard says).
//
// The zero sseScanner is ready for a stream.
type sseScanner struct {
	js jsonScanner
	// bom counts the bytes of a leading byte order mark read; 3 once the
	// stream's start has been passed.
	bom int
	// line is what the current line is, so far.
	line lineState
	// name holds the start of the line's field name; nameLen its length
	// (more than len(name) for a longer name).
	name    [4]byte
	nameLen int
	// space: the next byte is the first of a value, which drops one
	// leading space.
	space bool
	// cr: the last byte was CR, so that an LF after it ends no line.
	cr bool
	// The current event: whether it has data, how many bytes of data,
	// whether they passed MaxEventBytes, and how many bytes of "[DONE]"
	// its data has matched (-1: it is not [DONE]).
	hasData  bool
	dataLen  int64
	tooLarge bool
	done     int
	// The stream: the usage of the last event that had one, whether one
	// did, whether an event's data was too large to be read, whether
	// [DONE] came.
	usage       [numFields]count
	found       bool
	sawTooLarge bool
	finished    bool
}

type lineState uint8

const (
	lName lineState = iota // reading the field name
	lData                  // reading a data field's value
	lSkip                  // reading a comment or another field's value
)

var bom = [3]byte{0xEF, 0xBB, 0xBF}

// write reads p.
func (s *sseScanner) write(p []byte) {
	for i := 0; i < len(p) && !s.finished; i++ {
		s.step(p[i])
	}
}

func (s *sseScanner) step(c byte) {
	if s.bom < 3 {
		if c == bom[s.bom] {
			s.bom++
			return
		}
		if s.bom > 0 {
			s.nameLen = len(s.name) + 1 // part of a mark: no field of ours
		}
		s.bom = 3
	}
	if c == '\n' && s.cr {
		s.cr = false
		return
	}
	s.cr = c == '\r'
	if c == '\r' || c == '\n' {
		s.endLine()
		return
	}
	switch s.line {
	case lName:
		if c != ':' {
			if s.nameLen < len(s.name) {
				s.name[s.nameLen] = c
			}
			s.nameLen++
			return
		}
		if s.nameLen == 0 { // a comment
			s.line = lSkip
			return
		}
		if s.isData() {
			s.startData()
			s.line, s.space = lData, true
			return
		}
		s.line = lSkip
	case lData:
		if s.space {
			s.space = false
			if c == ' ' {
				return
			}
		}
		s.data(c)
	}
}

// isData reports whether the field name read is "data".
func (s *sseScanner) isData() bool {
	return s.nameLen == 4 && string(s.name[:]) == "data"
}

// startData starts a data line of the event: LF joins it to the one
// before.
func (s *sseScanner) startData() {
	if s.hasData {
		s.data('\n')
	}
	s.hasData = true
}

// data reads a byte of the event's data.
func (s *sseScanner) data(c byte) {
	if s.dataLen++; s.dataLen > MaxEventBytes {
		s.tooLarge = true
		return
	}
	if s.done >= 0 {
		if s.done < len(doneData) && c == doneData[s.done] {
			s.done++
		} else {
			s.done = -1
		}
	}
	if s.js.st != sError {
		s.js.step(c)
	}
}

// doneData is the data of the event that ends an OpenAI-compatible
// stream.
const doneData = "[DONE]"

// endLine ends a line: an empty one dispatches the event.
func (s *sseScanner) endLine() {
	switch {
	case s.line == lName && s.nameLen == 0:
		s.dispatch()
	case s.line == lName && s.isData():
		s.startData() // "data" alone: an empty value
	}
	s.line, s.nameLen, s.space = lName, 0, false
}

// dispatch ends the event.
func (s *sseScanner) dispatch() {
	switch {
	case !s.hasData:
	case s.tooLarge:
		s.sawTooLarge = true
	case s.done == len(doneData):
		s.finished = true
	case s.js.finish() && s.js.usageSeen && s.js.usageClosed:
		s.usage, s.found = s.js.usage, true
	}
	s.js.reset()
	s.hasData, s.dataLen, s.tooLarge, s.done = false, 0, false, 0
}
