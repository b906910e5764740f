package decode

import "unicode/utf8"

// MaxDepth is the deepest nesting of objects and arrays accepted inside an
// event (the event object itself is depth 1). Deeper messages are bad_json.
// encoding/json allows 10000; a flat event has no use for more than a few.
const MaxDepth = 1024

// kind is the JSON type of a scanned value.
type kind uint8

const (
	kindNone kind = iota // field absent
	kindString
	kindNumber
	kindTrue
	kindFalse
	kindNull
	kindObject
	kindArray

	// The values of the schema-encoded formats (avro, protobuf) and of
	// the record fields, held in span.num.
	kindInt    // a signed integer
	kindUint   // an unsigned integer (its bits in num)
	kindFloat  // a float64 (its bits in num)
	kindTimeMs // a time in Unix milliseconds (a timestamp logical type, $timestamp)
	kindVector // a binary array of numbers, [start, end) in the payload, encoded as elem says
)

// span locates one top-level value of the message. For strings, [start, end)
// is the content between the quotes (still escaped when esc is set); for
// every other kind it is the raw token.
//
// A span of a schema-encoded format or of a record field may instead hold
// its bytes in ext (the record key, a header value, an enum symbol: the
// value is then ext[start:end]) or its value in num (kindInt, kindUint,
// kindFloat, kindTimeMs).
type span struct {
	start, end int
	kind       kind
	esc        bool
	elem       uint8 // kindVector: the element encoding (vecElem*)
	ext        []byte
	num        int64
}

// strPlain[c] is true for bytes that may appear in a JSON string without any
// further check: printable ASCII other than '"' and '\\'.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// isWS reports JSON insignificant whitespace.
func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// hexVal returns the value of a hex digit, or -1.
func hexVal(c byte) int {
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

// hex4 decodes four hex digits at b[i:], or returns -1.
func hex4(b []byte, i int) rune {
	if i+4 > len(b) {
		return -1
	}
	r := 0
	for _, c := range b[i : i+4] {
		v := hexVal(c)
		if v < 0 {
			return -1
		}
		r = r<<4 | v
	}
	return rune(r)
}

// scanString validates the string whose opening quote is at b[i]. It returns
// the index just past the closing quote and whether the string holds escapes.
// Invalid UTF-8 and unpaired surrogate escapes give ReasonInvalidUTF8; every
// other defect (control characters, bad escapes, no closing quote) gives
// ReasonBadJSON.
func scanString(b []byte, i int) (end int, esc bool, r Reason) {
	j := i + 1
	for {
		// Fast path: runs of plain ASCII.
		for j < len(b) && strPlain[b[j]] {
			j++
		}
		if j >= len(b) {
			return j, esc, ReasonBadJSON
		}
		c := b[j]
		switch {
		case c == '"':
			return j + 1, esc, ReasonNone
		case c == '\\':
			esc = true
			if j+1 >= len(b) {
				return j, esc, ReasonBadJSON
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				u := hex4(b, j+2)
				if u < 0 {
					return j, esc, ReasonBadJSON
				}
				j += 6
				switch {
				case u >= 0xD800 && u < 0xDC00: // high surrogate: a low one must follow
					if j+1 >= len(b) || b[j] != '\\' || b[j+1] != 'u' {
						return j, esc, ReasonInvalidUTF8
					}
					lo := hex4(b, j+2)
					if lo < 0 {
						return j, esc, ReasonBadJSON
					}
					if lo < 0xDC00 || lo >= 0xE000 {
						return j, esc, ReasonInvalidUTF8
					}
					j += 6
				case u >= 0xDC00 && u < 0xE000: // lone low surrogate
					return j, esc, ReasonInvalidUTF8
				}
			default:
				return j, esc, ReasonBadJSON
			}
		case c < 0x20:
			return j, esc, ReasonBadJSON
		default: // c >= 0x80
			ru, size := utf8.DecodeRune(b[j:])
			if ru == utf8.RuneError && size <= 1 {
				return j, esc, ReasonInvalidUTF8
			}
			j += size
		}
	}
}

// scanNumber validates the JSON number starting at b[i] and returns the index
// just past it.
func scanNumber(b []byte, i int) (int, Reason) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j >= len(b):
		return j, ReasonBadJSON
	case b[j] == '0':
		j++
	case b[j] >= '1' && b[j] <= '9':
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
	default:
		return j, ReasonBadJSON
	}
	if j < len(b) && b[j] == '.' {
		j++
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == k {
			return j, ReasonBadJSON
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == k {
			return j, ReasonBadJSON
		}
	}
	return j, ReasonNone
}

// scanLiteral checks that b[i:] starts with lit.
func scanLiteral(b []byte, i int, lit string) (int, Reason) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, ReasonBadJSON
	}
	return i + len(lit), ReasonNone
}

// scanScalar validates a string, number or literal at b[i] (not a container).
func scanScalar(b []byte, i int) (sp span, end int, r Reason) {
	switch c := b[i]; {
	case c == '"':
		end, esc, r := scanString(b, i)
		return span{start: i + 1, end: end - 1, kind: kindString, esc: esc}, end, r
	case c == '-' || (c >= '0' && c <= '9'):
		end, r := scanNumber(b, i)
		return span{start: i, end: end, kind: kindNumber}, end, r
	case c == 't':
		end, r := scanLiteral(b, i, "true")
		return span{start: i, end: end, kind: kindTrue}, end, r
	case c == 'f':
		end, r := scanLiteral(b, i, "false")
		return span{start: i, end: end, kind: kindFalse}, end, r
	case c == 'n':
		end, r := scanLiteral(b, i, "null")
		return span{start: i, end: end, kind: kindNull}, end, r
	}
	return span{}, i, ReasonBadJSON
}

// States of skipContainer.
const (
	stKeyOrClose   = iota // just after '{'
	stKey                 // after ',' in an object
	stValueOrClose        // just after '['
	stValue               // after ':' or after ',' in an array
	stCommaOrClose        // after a value
)

// skipContainer validates the object or array opening at b[i] (at depth
// depth0, the event object being depth 1) without recursion, and returns the
// index just past its closing bracket.
func skipContainer(b []byte, i, depth0 int) (int, Reason) {
	// stack holds one bit per open container: 1 for an object, 0 for an array.
	var stack [MaxDepth/64 + 1]uint64
	depth := 0
	var state int
	push := func(c byte) bool {
		if depth0+depth+1 > MaxDepth {
			return false
		}
		w, bit := depth/64, uint(depth%64)
		if c == '{' {
			stack[w] |= 1 << bit
			state = stKeyOrClose
		} else {
			stack[w] &^= 1 << bit
			state = stValueOrClose
		}
		depth++
		return true
	}
	topIsObject := func() bool {
		d := depth - 1
		return stack[d/64]&(1<<uint(d%64)) != 0
	}
	if !push(b[i]) {
		return i, ReasonBadJSON
	}
	i++
	for {
		i = skipWS(b, i)
		if i >= len(b) {
			return i, ReasonBadJSON
		}
		c := b[i]
		switch state {
		case stKeyOrClose, stKey:
			if c == '}' && state == stKeyOrClose {
				i++
				depth--
				if depth == 0 {
					return i, ReasonNone
				}
				state = stCommaOrClose
				continue
			}
			if c != '"' {
				return i, ReasonBadJSON
			}
			end, _, r := scanString(b, i)
			if r != ReasonNone {
				return end, r
			}
			i = skipWS(b, end)
			if i >= len(b) || b[i] != ':' {
				return i, ReasonBadJSON
			}
			i++
			state = stValue
		case stValueOrClose, stValue:
			if c == ']' && state == stValueOrClose {
				i++
				depth--
				if depth == 0 {
					return i, ReasonNone
				}
				state = stCommaOrClose
				continue
			}
			if c == '{' || c == '[' {
				if !push(c) {
					return i, ReasonBadJSON
				}
				i++
				continue
			}
			_, end, r := scanScalar(b, i)
			if r != ReasonNone {
				return end, r
			}
			i = end
			state = stCommaOrClose
		case stCommaOrClose:
			obj := topIsObject()
			switch {
			case c == ',':
				i++
				if obj {
					state = stKey
				} else {
					state = stValue
				}
			case (c == '}' && obj) || (c == ']' && !obj):
				i++
				depth--
				if depth == 0 {
					return i, ReasonNone
				}
			default:
				return i, ReasonBadJSON
			}
		}
	}
}

// unescape writes the decoded form of the escaped string content src (already
// validated by scanString) into dst and returns the length written; ok is
// false when dst is too small.
func unescape(dst, src []byte) (n int, ok bool) {
	for i := 0; i < len(src); {
		c := src[i]
		if c != '\\' {
			if n >= len(dst) {
				return n, false
			}
			dst[n] = c
			n++
			i++
			continue
		}
		var ru rune
		switch src[i+1] {
		case 'u':
			ru = hex4(src, i+2)
			i += 6
			if ru >= 0xD800 && ru < 0xDC00 {
				lo := hex4(src, i+2)
				ru = 0x10000 + (ru-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			}
		case 'b':
			ru, i = '\b', i+2
		case 'f':
			ru, i = '\f', i+2
		case 'n':
			ru, i = '\n', i+2
		case 'r':
			ru, i = '\r', i+2
		case 't':
			ru, i = '\t', i+2
		default: // '"', '\\', '/'
			ru, i = rune(src[i+1]), i+2
		}
		if n+utf8.RuneLen(ru) > len(dst) {
			return n, false
		}
		n += utf8.EncodeRune(dst[n:], ru)
	}
	return n, true
}
