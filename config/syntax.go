package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// What Parse reports for a file that is not valid YAML.
//
// yaml.v3 stops at the first syntax error and returns no partial tree, and
// the line in its message is often not where the problem is: for parser
// errors it prints the parser's context mark — where the enclosing block
// starts — counted from 0 (or, when that is 0, the problem's own mark, also
// counted from 0; only scanner errors are counted from 1). A mis-indented
// key on line 6 of a list item that starts on line 4 is reported as "line
// 3". Two things are done about that:
//
//   - locate finds the problem's line: the first n such that the file's
//     first n lines already fail with the very same error. Parsing stops at
//     the first error, so every longer prefix fails with it and every shorter
//     one does not (it parses, or fails differently, at its truncated end):
//     a binary search over n finds it.
//   - checkAroundSyntax blanks the top-level section holding that line (from
//     its key in column 0 to the next line in column 0; blank lines keep the
//     other lines' numbers) and parses again, up to maxSkippedSections times,
//     until the rest parses. The rest is then decoded and validated, and its
//     problems are reported beside the syntax errors, except those about the
//     skipped sections: a problem whose path lies in a skipped section, or
//     whose message names one (checks that read another section name it, e.g.
//     "must be a whole multiple of window.size"), could be an effect of the
//     skipping rather than of the file.
//
// When a section cannot be told apart (the error is on a line that is not
// inside a "key:" section, or the file is larger than maxRecheckBytes), only
// the syntax error is reported, with yaml.v3's own line for large files.

// maxSkippedSections bounds how many broken sections are skipped before
// giving up on checking the rest.
const maxSkippedSections = 8

// maxRecheckBytes bounds the files whose syntax errors are located and
// worked around: each costs a few dozen parses.
const maxRecheckBytes = 1 << 20

// yamlLineErr matches yaml.v3's syntax errors.
var yamlLineErr = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// splitYAMLError returns the line a yaml.v3 error names (0: none) and its
// message without the "yaml: line N: " prefix.
func splitYAMLError(err error) (int, string) {
	msg := err.Error()
	if m := yamlLineErr.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return line, m[2]
	}
	return 0, strings.TrimPrefix(msg, "yaml: ")
}

// locate returns the line of the syntax error err, which parsing the
// concatenation of lines (each with its newline) gave, and its message.
func locate(lines []string, err error) (int, string) {
	reported, msg := splitYAMLError(err)
	if reported < 1 || reported > len(lines) {
		return reported, msg
	}
	want := err.Error()
	fails := func(n int) bool {
		_, _, e := parseYAML([]byte(strings.Join(lines[:n], "")))
		return e != nil && e.Error() == want
	}
	// fails(len(lines)) holds: that is the whole text.
	lo, hi := 1, len(lines)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, msg
}

// topLevelKey matches a line holding a plain key in column 0.
var topLevelKey = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:([ \t]|$)`)

// inColumn0 reports whether a line starts a new top-level item: it has
// content and neither starts with white space nor is a comment.
func inColumn0(line string) bool {
	line = strings.TrimRight(line, "\r\n")
	return line != "" && line[0] != ' ' && line[0] != '\t' && line[0] != '#'
}

// sectionOf returns the top-level section holding line (1-based): its first
// and last line and its key ("" when it does not start with a plain key).
func sectionOf(lines []string, line int) (first, last int, key string) {
	first = line
	for first >= 1 && !inColumn0(lines[first-1]) {
		first--
	}
	if first < 1 {
		return 1, line, ""
	}
	last = line
	for last < len(lines) && !inColumn0(lines[last]) {
		last++
	}
	if m := topLevelKey.FindStringSubmatch(strings.TrimRight(lines[first-1], "\r\n")); m != nil {
		key = m[1]
	}
	return first, last, key
}

// skipped is a top-level section left out after a syntax error.
type skipped struct {
	first, last int
	key         string
}

// checkAroundSyntax returns the problems of data, whose parse failed with
// err: the syntax errors, then the problems of the sections that parse (see
// the comment at the top of this file).
func checkAroundSyntax(data []byte, err error, lookup func(string) (string, bool)) []Problem {
	if len(data) > maxRecheckBytes {
		line, msg := splitYAMLError(err)
		return []Problem{{Line: line, Message: "yaml syntax: " + msg}}
	}
	lines := strings.SplitAfter(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1] // after the final newline
	}
	orig := slices.Clone(lines)
	var (
		syntax []Problem
		skips  []skipped
		rest   []Problem
	)
	for {
		line, msg := locate(lines, err)
		p := Problem{Line: line, Message: "yaml syntax: " + msg}
		first, last, key := 0, 0, ""
		if line >= 1 && line <= len(lines) && strings.TrimSpace(lines[line-1]) != "" {
			first, last, key = sectionOf(lines, line)
		}
		if key == "" || len(skips) == maxSkippedSections {
			// No section to skip (or too many skipped): the rest is not
			// checked. An error found only after skipping sections that
			// cannot be placed either (an alias to an anchor that was in
			// a skipped section has no line) is left out: it may be an
			// effect of the skipping.
			if len(skips) == 0 || key != "" {
				syntax = append(syntax, p)
			}
			return syntax
		}
		syntax = append(syntax, p)
		// Blank the section, keeping each line's newline (and so the
		// other lines' numbers); name it by its last line with content.
		for i := first; i <= last; i++ {
			lines[i-1] = lines[i-1][len(strings.TrimRight(lines[i-1], "\r\n")):]
		}
		for last > line && !hasContent(orig[last-1]) {
			last--
		}
		skips = append(skips, skipped{first, last, key})
		root, second, perr := parseYAML([]byte(strings.Join(lines, "")))
		if perr != nil {
			err = perr
			continue
		}
		if second > 0 {
			rest = []Problem{secondDocument(second)}
			break
		}
		cfg, probs := decode(root, lookup)
		if len(probs) > 0 {
			rest = probs
			break
		}
		cfg.ApplyDefaults()
		if verr := cfg.Validate(); verr != nil {
			for _, p := range verr.(*ValidationError).Problems {
				if !aboutSkipped(p, skips) {
					rest = append(rest, p)
				}
			}
		}
		break
	}
	// The rest was checked: say what was not.
	for i := range syntax {
		if i < len(skips) {
			s := skips[i]
			syntax[i].Message += fmt.Sprintf("; lines %d-%d (%s) were skipped and the rest of the file checked", s.first, s.last, s.key)
		}
	}
	slices.SortStableFunc(syntax, func(a, b Problem) int { return a.Line - b.Line })
	return append(syntax, rest...)
}

// aboutSkipped reports whether p concerns a skipped section: its path lies in
// one, or its message names one.
func aboutSkipped(p Problem, skips []skipped) bool {
	top := p.Path
	if i := strings.IndexAny(top, ".["); i >= 0 {
		top = top[:i]
	}
	for _, s := range skips {
		if top == s.key || strings.Contains(p.Message, s.key+".") {
			return true
		}
	}
	return false
}

// hasContent reports whether a line holds something other than white space
// and a comment.
func hasContent(line string) bool {
	l := strings.TrimSpace(line)
	return l != "" && l[0] != '#'
}
