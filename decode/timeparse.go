package decode

// Accepted event times, in Unix milliseconds: from the Unix epoch
// (1970-01-01T00:00:00Z) to the end of year 9999. Anything else is bad_time.
const (
	MinTimeMs int64 = 0
	MaxTimeMs int64 = 253402300799999 // 9999-12-31T23:59:59.999Z
)

// parseEpochNumber parses a JSON number (already validated by scanNumber) as
// Unix milliseconds. Any JSON number form is accepted, exponents included
// ("1.7e12"); fractional milliseconds are truncated (the value is floored).
// Negative values other than zero, and values above MaxTimeMs, are rejected.
func parseEpochNumber(b []byte) (int64, bool) {
	// Fast path: a plain non-negative integer of at most 15 digits.
	if len(b) <= 15 {
		var v int64
		plain := true
		for _, c := range b {
			if c < '0' || c > '9' {
				plain = false
				break
			}
			v = v*10 + int64(c-'0')
		}
		if plain {
			return v, v <= MaxTimeMs
		}
	}
	i := 0
	neg := false
	if b[0] == '-' {
		neg = true
		i++
	}
	// The value is 0.d1d2…dn × 10^point, with d1 ≠ 0 (significant digits).
	var sig [20]byte // the first significant digits; more cannot fit MaxTimeMs
	nsig := 0        // number of significant digits seen (may exceed len(sig))
	point := 0       // decimal exponent of the digit string, see above
	seenDot := false
	for ; i < len(b); i++ {
		c := b[i]
		if c == '.' {
			seenDot = true
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		if nsig == 0 && c == '0' {
			if seenDot {
				point--
			}
			continue
		}
		if nsig < len(sig) {
			sig[nsig] = c
		}
		nsig++
		if !seenDot {
			point++
		}
	}
	if i < len(b) { // exponent
		i++ // 'e' or 'E'
		eneg := false
		if b[i] == '+' || b[i] == '-' {
			eneg = b[i] == '-'
			i++
		}
		e := 0
		for ; i < len(b); i++ {
			if e < 1_000_000 { // beyond this the result is 0 or out of range anyway
				e = e*10 + int(b[i]-'0')
			}
		}
		if eneg {
			e = -e
		}
		point += e
	}
	if nsig == 0 {
		return 0, true // zero, including -0 and 0e99
	}
	if neg {
		return 0, false
	}
	if point <= 0 {
		return 0, true // 0 < value < 1: floors to 0
	}
	if point > 15 { // value ≥ 10^15 > MaxTimeMs
		return 0, false
	}
	var v int64
	for k := 0; k < point; k++ {
		d := int64(0)
		if k < nsig {
			d = int64(sig[k] - '0')
		}
		v = v*10 + d
	}
	if v > MaxTimeMs {
		return 0, false
	}
	return v, true
}

// parseEpochDigits parses a string of ASCII digits (the string form of epoch
// milliseconds, e.g. "1700000000000").
func parseEpochDigits(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
		if v > MaxTimeMs {
			return 0, false
		}
	}
	return v, true
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// digits parses n ASCII digits at b[i:].
func digits(b []byte, i, n int) (int, bool) {
	if i+n > len(b) {
		return 0, false
	}
	v := 0
	for _, c := range b[i : i+n] {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(y, m int) int {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil returns days since 1970-01-01 of the proleptic Gregorian date
// (H. Hinnant's algorithm), for years 0–9999.
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12 // March = 0
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// parseRFC3339 parses an RFC 3339 date-time ("2023-11-14T22:13:20Z",
// "2023-11-14T22:13:20.123456+01:00") into Unix milliseconds. Accepted:
// 'T', 't' or ' ' between date and time; 'Z' or 'z' or ±hh:mm as offset;
// any number of fraction digits (truncated to milliseconds). Rejected:
// second 60 (leap seconds; time.Parse rejects them too), out-of-range
// fields, offsets of 24h or more, and results outside [MinTimeMs, MaxTimeMs].
func parseRFC3339(b []byte) (int64, bool) {
	// yyyy-mm-ddThh:mm:ss is 19 bytes; the shortest valid form adds "Z".
	if len(b) < 20 || b[4] != '-' || b[7] != '-' || b[13] != ':' || b[16] != ':' {
		return 0, false
	}
	if c := b[10]; c != 'T' && c != 't' && c != ' ' {
		return 0, false
	}
	year, ok1 := digits(b, 0, 4)
	month, ok2 := digits(b, 5, 2)
	day, ok3 := digits(b, 8, 2)
	hour, ok4 := digits(b, 11, 2)
	minute, ok5 := digits(b, 14, 2)
	sec, ok6 := digits(b, 17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return 0, false
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(year, month) ||
		hour > 23 || minute > 59 || sec > 59 {
		return 0, false
	}
	i := 19
	ms := 0
	if b[i] == '.' {
		i++
		k := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if i-k < 3 {
				ms = ms*10 + int(b[i]-'0')
			}
			i++
		}
		n := i - k
		if n == 0 {
			return 0, false
		}
		for ; n < 3; n++ {
			ms *= 10
		}
	}
	if i >= len(b) {
		return 0, false
	}
	offset := 0 // seconds east of UTC
	switch b[i] {
	case 'Z', 'z':
		i++
	case '+', '-':
		if len(b)-i != 6 || b[i+3] != ':' {
			return 0, false
		}
		oh, okh := digits(b, i+1, 2)
		om, okm := digits(b, i+4, 2)
		if !okh || !okm || oh > 23 || om > 59 {
			return 0, false
		}
		offset = oh*3600 + om*60
		if b[i] == '-' {
			offset = -offset
		}
		i += 6
	default:
		return 0, false
	}
	if i != len(b) {
		return 0, false
	}
	secs := daysFromCivil(year, month, day)*86400 + int64(hour*3600+minute*60+sec) - int64(offset)
	v := secs*1000 + int64(ms)
	if v < MinTimeMs || v > MaxTimeMs {
		return 0, false
	}
	return v, true
}
