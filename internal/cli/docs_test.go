package cli

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docOutputMarker precedes, in the docs, a fenced code block that quotes
// what a command prints:
//
//	<!-- doc-output: stage validate --config examples/returning-users.yaml -->
//	```
//	  view pages_hour  35% of the count budget (budget_share) … σ=71.9604
//	```
//
// TestDocsQuoteWhatTheToolPrints runs the command and checks the quote.
const docOutputMarker = "<!-- doc-output: "

// docQuote is one marked block: the command (after "stage") and its lines.
type docQuote struct {
	file  string
	line  int
	args  []string
	lines []string
}

// docQuotes reads the marked blocks of a Markdown file.
func docQuotes(t *testing.T, path string) []docQuote {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docQuote
	var cur *docQuote
	inBlock := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(strings.TrimSpace(l), docOutputMarker):
			cmd := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), docOutputMarker), "-->")
			fields := strings.Fields(cmd)
			if len(fields) < 2 || fields[0] != "stage" {
				t.Fatalf("%s:%d: marker %q: want \"stage <command> ...\"", path, n, l)
			}
			cur = &docQuote{file: path, line: n, args: fields[1:]}
		case cur != nil && !inBlock && strings.HasPrefix(strings.TrimSpace(l), "```"):
			inBlock = true
		case cur != nil && inBlock && strings.HasPrefix(strings.TrimSpace(l), "```"):
			out = append(out, *cur)
			cur, inBlock = nil, false
		case cur != nil && inBlock:
			if strings.TrimSpace(l) != "" {
				cur.lines = append(cur.lines, l)
			}
		case cur != nil && strings.TrimSpace(l) != "":
			t.Fatalf("%s:%d: a doc-output marker must be followed by a fenced code block", path, cur.line)
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: unterminated doc-output block", path, cur.line)
	}
	return out
}

// squash collapses runs of white space to one space (the tool aligns its
// columns with tabwriter; the docs may not).
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// quoteMissing returns the first fragment of the quoted lines not found in
// out in order ("…" in a quoted line skips output), "" when all are.
func quoteMissing(out string, lines []string) string {
	out = squash(out)
	pos := 0
	for _, l := range lines {
		for _, frag := range strings.Split(l, "…") {
			frag = squash(frag)
			if frag == "" {
				continue
			}
			i := strings.Index(out[pos:], frag)
			if i < 0 {
				return frag
			}
			pos += i + len(frag)
		}
	}
	return ""
}

// TestDocsQuoteWhatTheToolPrints (issue 29 item 4): every block of the
// README and docs/choosing.md marked as a command's output is what the
// command prints today — the figures the docs quote (K, shares, σ,
// predicted errors) cannot drift from the tool. Runs each command
// in-process from the repository's root.
func TestDocsQuoteWhatTheToolPrints(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var quotes []docQuote
	for _, f := range []string{"README.md", filepath.Join("docs", "choosing.md")} {
		quotes = append(quotes, docQuotes(t, filepath.Join(root, f))...)
	}
	if len(quotes) == 0 {
		t.Fatal("no doc-output blocks found: the docs' quoted figures are not checked")
	}
	t.Chdir(root)
	outs := map[string]string{} // one run per command
	for _, q := range quotes {
		key := strings.Join(q.args, " ")
		out, ok := outs[key]
		if !ok {
			var o, e bytes.Buffer
			if code := Main(q.args, &o, &e); code != 0 {
				t.Fatalf("%s:%d: stage %s: exit %d: %s", q.file, q.line, key, code, e.String())
			}
			out = o.String()
			outs[key] = out
		}
		if frag := quoteMissing(out, q.lines); frag != "" {
			t.Errorf("%s:%d: stage %s does not print (in this order) %q; it prints:\n%s", q.file, q.line, key, frag, out)
		}
	}
}

// TestQuoteMissing: the matcher finds fragments in order, skips "…",
// ignores white-space differences, and reports what is missing or out of
// order.
func TestQuoteMissing(t *testing.T) {
	out := "view a\t 35%  σ=71.9\nview b  55% σ=256\n"
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"view a 35% σ=71.9"}, ""},
		{[]string{"view a … σ=71.9", "view b … σ=256"}, ""},
		{[]string{"view b … σ=256", "view a"}, "view a"},
		{[]string{"view a 35% σ=72"}, "view a 35% σ=72"},
	} {
		if got := quoteMissing(out, tc.lines); got != tc.want {
			t.Errorf("quoteMissing(%q) = %q, want %q", tc.lines, got, tc.want)
		}
	}
}
