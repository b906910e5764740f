package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dpstage/stage/internal/httpapi"
)

// MetricsFigures are the CPU costs of scraping the stage's /metrics
// (internal/httpapi), measured in the stage child right after its pass,
// with the stage still running: its partitions assigned, its lag, drop
// reasons, budget period and latency histogram filled.
//
// A scrape's CPU is the process's user+system time over Scrapes scrapes,
// less what the idle stage used over the same wall time (IdleCPUMsPerSec,
// measured just before), divided by Scrapes.
type MetricsFigures struct {
	Scrapes int `json:"scrapes"`
	// Bytes: the text-format body; GzipBytes: the body as sent to
	// Prometheus (which asks for gzip); Samples: its sample lines.
	Bytes     int `json:"bytes"`
	GzipBytes int `json:"gzip_bytes"`
	Samples   int `json:"samples"`
	// FirstCPUMs: the first scrape of the process, alone.
	FirstCPUMs float64 `json:"first_cpu_ms"`
	// CPUMs: one scrape through the server's handler as Prometheus makes
	// it (Accept-Encoding: gzip); PlainCPUMs: without compression.
	CPUMs      float64 `json:"cpu_ms"`
	PlainCPUMs float64 `json:"plain_cpu_ms"`
	WallMs     float64 `json:"wall_ms"`
	// GatherCPUMs: the server's registry's Gather alone (every collector,
	// no encoding); GoCollectorCPUMs and ProcessCollectorCPUMs: a registry
	// holding only client_golang's Go collector, or only its process
	// collector, as the server registers them. Gather less those two is
	// the stage's own collector and the latency histogram.
	GatherCPUMs           float64 `json:"gather_cpu_ms"`
	GoCollectorCPUMs      float64 `json:"go_collector_cpu_ms"`
	ProcessCollectorCPUMs float64 `json:"process_collector_cpu_ms"`
	IdleCPUMsPerSec       float64 `json:"idle_cpu_ms_per_sec"`
}

// prometheusAccept is the Accept header of a Prometheus 3 scrape.
const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"

// measureMetrics measures scrapes of web's /metrics (see MetricsFigures);
// profile, when set, receives a CPU profile of the gzip scrapes.
func measureMetrics(web *httpapi.Server, scrapes int, profile string) (*MetricsFigures, error) {
	h := web.OperatorHandler()
	scrape := func(gz bool) (*httptest.ResponseRecorder, error) {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept", prometheusAccept)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return nil, fmt.Errorf("/metrics answered %d: %s", rec.Code, rec.Body.String())
		}
		return rec, nil
	}
	f := &MetricsFigures{Scrapes: scrapes}

	// The idle stage's own CPU rate, to subtract.
	c0, t0 := processCPU(), time.Now()
	time.Sleep(300 * time.Millisecond)
	idle := float64(processCPU()-c0) / float64(time.Since(t0)) // CPU seconds per second
	f.IdleCPUMsPerSec = idle * 1000

	// perScrape runs fn n times and returns its CPU and wall ms per call.
	perScrape := func(n int, fn func() error) (cpuMs, wallMs float64, err error) {
		c0, t0 := processCPU(), time.Now()
		for range n {
			if err := fn(); err != nil {
				return 0, 0, err
			}
		}
		wall := time.Since(t0)
		cpu := float64(processCPU()-c0) - idle*float64(wall)
		return max(cpu, 0) / float64(n) / 1e6, float64(wall) / float64(n) / 1e6, nil
	}

	var err error
	if f.FirstCPUMs, _, err = perScrape(1, func() error { _, err := scrape(true); return err }); err != nil {
		return nil, err
	}
	rec, err := scrape(false)
	if err != nil {
		return nil, err
	}
	body := rec.Body.Bytes()
	f.Bytes = len(body)
	for _, l := range strings.Split(string(body), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			f.Samples++
		}
	}
	if rec, err = scrape(true); err != nil {
		return nil, err
	}
	if enc := rec.Header().Get("Content-Encoding"); enc != "gzip" {
		return nil, fmt.Errorf("/metrics answered a gzip request with Content-Encoding %q", enc)
	}
	f.GzipBytes = rec.Body.Len()

	stopProf := func() error { return nil }
	if profile != "" {
		pf, err := os.Create(profile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return nil, err
		}
		stopProf = func() error { pprof.StopCPUProfile(); return pf.Close() }
	}
	f.CPUMs, f.WallMs, err = perScrape(scrapes, func() error { _, err := scrape(true); return err })
	if perr := stopProf(); err == nil && perr != nil {
		err = perr
	}
	if err != nil {
		return nil, err
	}
	if f.PlainCPUMs, _, err = perScrape(scrapes, func() error { _, err := scrape(false); return err }); err != nil {
		return nil, err
	}
	reg := web.Registry()
	if f.GatherCPUMs, _, err = perScrape(scrapes, func() error { _, err := reg.Gather(); return err }); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		col prometheus.Collector
		dst *float64
	}{
		{collectors.NewGoCollector(), &f.GoCollectorCPUMs},
		{collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &f.ProcessCollectorCPUMs},
	} {
		r := prometheus.NewRegistry()
		r.MustRegister(c.col)
		if _, err := r.Gather(); err != nil { // its first gather, not timed
			return nil, err
		}
		if *c.dst, _, err = perScrape(scrapes, func() error { _, err := r.Gather(); return err }); err != nil {
			return nil, err
		}
	}
	return f, nil
}
