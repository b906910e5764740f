package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/internal/generator"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/release"
)

// chromium returns the headless browser to use: $CHROMIUM, else Debian's
// /usr/bin/chromium, else chromium on the PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Skip("no headless browser: /usr/bin/chromium does not exist and chromium is not on the PATH (Debian: apt-get install -y chromium; or set $CHROMIUM)")
	return ""
}

// runChromium runs headless Chromium on url with extra flags and returns its
// standard output.
func runChromium(t *testing.T, bin, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,900", "--virtual-time-budget=3000"}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\nstderr:\n%s", extra, err, stderr.String())
	}
	return stdout.Bytes()
}

var (
	attrRE   = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)
	cardRE   = regexp.MustCompile(`<section class="card"[^>]*>`)
	barRE    = regexp.MustCompile(`<g data-bin="[^>]*>`)
	volumeRE = regexp.MustCompile(`<svg [^>]*class="volume"[^>]*>`)
)

func attrs(tag string) map[string]string {
	out := map[string]string{}
	for _, m := range attrRE.FindAllStringSubmatch(tag, -1) {
		out[m[1]] = html.UnescapeString(m[2])
	}
	return out
}

// TestBrowserDashboard loads the page from a running stage (embedded broker,
// synthetic events) in headless Chromium once live data is there, and checks
// that every declared histogram/group is drawn with its bars, each with
// the release's interval as its band, and its volume (the release's
// total), and that the budget gauge shows a
// number. It saves a screenshot ($DASHBOARD_SCREENSHOT_DIR, else a temporary
// directory).
func TestBrowserDashboard(t *testing.T) {
	bin := chromium(t)
	e := newEnv(t, "2s", "", nil)
	e.cfg.Window.Start = "" // live generator data: the first window is the wall clock's
	e.start()

	gen, err := generator.New(generator.Config{Users: 400, EventsPerSecond: 400, TimeScale: 10, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(e.broker.Addr()), Transport: &kafka.Transport{}, Topic: "events-" + e.name, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond}
	gctx, stopGen := context.WithCancel(context.Background())
	genDone := make(chan error, 1)
	go func() { genDone <- gen.Run(gctx, w) }() // owner: this test; ends with stopGen
	defer func() {
		stopGen()
		if err := <-genDone; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("generator: %v", err)
		}
		w.Close()
	}()

	// Live data: a few windows of every declared (histogram, group).
	pairs := map[string][]string{}
	for _, h := range e.cfg.Histograms {
		pairs[h.Name] = h.GroupNames()
	}
	e2e.WaitFor(t, "three windows of releases", 30*time.Second, func() bool {
		for h, gs := range pairs {
			for _, g := range gs {
				if msgs, _ := e.web.Store().Query(h, g, 3); len(msgs) < 3 {
					return false
				}
			}
		}
		return true
	})

	dom := string(runChromium(t, bin, e.url, "--dump-dom"))
	releases := map[string]release.Release{}
	_, _, body := e.get("/api/releases?limit=1000", "")
	var all []release.Release
	e2e.DecodeJSON(t, body, &all)
	for _, r := range all {
		releases[r.ReleaseID] = r
	}

	cards := cardRE.FindAllStringIndex(dom, -1)
	drawn := map[string]bool{}
	for i, loc := range cards {
		a := attrs(dom[loc[0]:loc[1]])
		end := len(dom)
		if i+1 < len(cards) {
			end = cards[i+1][0]
		}
		section := dom[loc[1]:end]
		key := a["data-histogram"] + "/" + a["data-group"]
		rel, ok := releases[a["data-release-id"]]
		if !ok {
			t.Errorf("%s: card without a known release (%q)", key, a["data-release-id"])
			continue
		}
		if rel.Histogram+"/"+rel.Group != key {
			t.Errorf("card %s shows release of %s/%s", key, rel.Histogram, rel.Group)
		}
		if rel.Intervals == nil || rel.Total == nil {
			t.Errorf("%s: release without intervals or total", key)
			continue
		}
		lo, hi := rel.Intervals.Low, rel.Intervals.High
		bars := barRE.FindAllString(section, -1)
		if len(bars) != len(rel.Bins) {
			t.Errorf("%s: %d bars drawn, want %d", key, len(bars), len(rel.Bins))
			continue
		}
		for j, bar := range bars {
			b := attrs(bar)
			p, errP := strconv.ParseFloat(b["data-p"], 64)
			l, errL := strconv.ParseFloat(b["data-lo"], 64)
			h, errH := strconv.ParseFloat(b["data-hi"], 64)
			if b["data-bin"] != rel.Bins[j] || errors.Join(errP, errL, errH) != nil || p != rel.Probabilities[j] {
				t.Errorf("%s bar %d: %v, want bin %s p %v", key, j, b, rel.Bins[j], rel.Probabilities[j])
				continue
			}
			// The page's band is the release's interval.
			if l != lo[j] || h != hi[j] {
				t.Errorf("%s bin %s: page band [%g, %g], the release's interval [%g, %g]", key, rel.Bins[j], l, h, lo[j], hi[j])
			}
		}
		// The volume: the release's total with its interval.
		vol := volumeRE.FindString(section)
		va := attrs(vol)
		if vol == "" || va["data-total"] != strconv.FormatFloat(rel.Total.Estimate, 'g', -1, 64) ||
			va["data-total-lo"] != strconv.FormatFloat(rel.Total.Low, 'g', -1, 64) || va["data-total-hi"] != strconv.FormatFloat(rel.Total.High, 'g', -1, 64) {
			t.Errorf("%s: volume %q, want the release's total %+v", key, vol, *rel.Total)
		}
		drawn[key] = true
	}
	for h, gs := range pairs {
		for _, g := range gs {
			if !drawn[h+"/"+g] {
				t.Errorf("%s/%s is not drawn", h, g)
			}
		}
	}

	// The budget gauge shows a number, the one the API reports.
	m := regexp.MustCompile(`<span class="bignum" id="budget-spent" data-spent="([^"]*)">([^<]*)</span>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no budget gauge in the page:\n%s", dom)
	}
	spent, err := strconv.ParseFloat(m[1], 64)
	if err != nil || !(spent > 0) || !strings.Contains(m[2], "ε = ") {
		t.Errorf("budget gauge shows %q (data-spent %q)", m[2], m[1])
	}
	var bv httpapi.BudgetView
	_, _, body = e.get("/api/budget", "")
	e2e.DecodeJSON(t, body, &bv)
	if len(bv.Periods) == 0 || spent > bv.Periods[len(bv.Periods)-1].SpentEpsilon {
		t.Errorf("gauge says ε %v spent, the API %s", spent, body)
	}
	if !strings.Contains(dom, "for each user, everything published per period of 1 hour is together (ε = 10, δ = 10⁻⁶ + 2n·2⁻⁶⁴)-differentially private") {
		t.Errorf("the page does not state the guarantee")
	}

	dir := os.Getenv("DASHBOARD_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, "dashboard.png")
	runChromium(t, bin, e.url, "--screenshot="+shot, "--hide-scrollbars")
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}
