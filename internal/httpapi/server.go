// Package httpapi is the stage's HTTP server, on two listeners kept apart
// (issue #21, item 8):
//
//   - the public surface (http.address; [Server.Handler], [Server.Serve]):
//     the live dashboard page at / (one self-contained HTML file embedded in
//     the binary) and a JSON API of the recent private releases
//     (/api/releases, /api/budget, /api/layout), for the people who read the
//     dashboards;
//   - the operator surface (http.operator_address; [Server.OperatorHandler],
//     [Server.ServeOperator]): Prometheus metrics (/metrics), for operators
//     and Prometheus only.
//
// Both serve the liveness and readiness probes (/healthz, /readyz), which
// carry no count; the operator's /readyz also lists, with
// contribution.max_windows_per_user, the histograms whose last closed
// window the bound left blind (window_bound_blind, not a condition of
// ready: a function of private drop counts, so never on the public
// listener). A path of the other surface answers 404 on each.
//
// # What each may show
//
// The public surface shows only what the output topic already carries: the
// release and status messages exactly as published (kept in a bounded
// in-memory [Store] fed by the stage's OnRelease callback), the budget spent
// (every release carries it; a period's charges follow from the public
// config, not from the data), and the public configuration (histogram
// names, bins, groups, the mechanism's parameters — also in every release).
// No raw count, no event total, no drop count, no per-window user number.
// The page's shaded bands are the releases' own intervals and its volume
// lines their private totals (package interval): part of every release.
//
// /metrics carries event totals and drop counts per reason, lag and the
// like (see the Metric* constants): these are private — differencing a
// counter between two scrapes gives a window's exact count — and are
// served on the operator listener only.
//
// # Authentication
//
// Each listener has its own token: http.bearer_token on the public one,
// http.operator_token on the operator one (config refuses the same token
// for both). With a token configured, every path of that listener but
// /healthz and /readyz requires it, as "Authorization: Bearer TOKEN"
// (Prometheus, curl) or as the password of HTTP Basic authentication (any
// user name): browsers cannot add a bearer header to a page they navigate
// to, but they ask for Basic credentials and then send them with the page's
// own requests. Tokens are compared in constant time.
package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// Source is what the server reads from the stage; *pipeline.Stage
// implements it.
type Source interface {
	Stats() *pipeline.Stats
	Readiness() pipeline.Readiness
	Lag() map[int]int64
	Budget() []pipeline.BudgetStatus
	Plan() *plan.Plan
}

var _ Source = (*pipeline.Stage)(nil)

// Options configure a Server.
type Options struct {
	// Config is the stage's validated configuration: the declared histograms,
	// the budget, http.bearer_token and http.operator_token.
	Config *config.Config
	Log    *zap.Logger
	// History is how many messages the store keeps per (histogram, group).
	// Default 60.
	History int
	// ShutdownTimeout bounds the graceful shutdown. Default 5s.
	ShutdownTimeout time.Duration
	// Plan is the stage's privacy plan of Config, for the planned views
	// of /api/layout (PlannedView); derived from Config when nil and
	// privacy.expected_windows_per_user is set.
	Plan *plan.Plan
	// StartedAt is when this stage process started (public: /api/layout's
	// started_at, which the page uses to mark the window in progress at
	// the start). Default: the time New is called.
	StartedAt time.Time
	// SelectedReleases is how many release messages the store keeps of a
	// histogram that selects its groups, over all its groups (the oldest
	// windows' go first). Default History × 50.
	SelectedReleases int
}

// Server serves the endpoints. Create it with New, feed it with OnRelease,
// attach the stage with Attach and run it with Serve (the public listener)
// and ServeOperator (the operator one).
type Server struct {
	cfg       *config.Config
	log       *zap.Logger
	store     *Store
	reg       *prometheus.Registry
	latency   prometheus.Histogram
	public    token // http.bearer_token: the public listener's
	operator  token // http.operator_token: the operator listener's
	shutdown  time.Duration
	handler   http.Handler // the public surface
	opHandler http.Handler // the operator surface
	page      []byte       // the embedded dashboard
	pageCSP   string       // its Content-Security-Policy (hashes of its inline script and style)
	layout    []byte       // /api/layout, computed once
	history   int          // Options.History
	// plannedSelection is the plan's selection of the selecting
	// histograms (public config), nil without one.
	plannedSelection *release.Selection
	selMetrics       *selectionMetrics

	src atomic.Pointer[sourceBox] // the stage, once attached
}

type sourceBox struct{ s Source }

// New builds a server. It does not listen yet.
func New(opts Options) (*Server, error) {
	if opts.Config == nil {
		return nil, errors.New("httpapi: nil config")
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.History <= 0 {
		opts.History = 60
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 5 * time.Second
	}
	s := &Server{
		cfg:      opts.Config,
		log:      opts.Log,
		store:    NewStore(opts.History),
		shutdown: opts.ShutdownTimeout,
	}
	s.public = newToken(opts.Config.HTTP.BearerToken, "http.bearer_token")
	s.operator = newToken(opts.Config.HTTP.OperatorToken, "http.operator_token")
	s.reg, s.latency = newRegistry(s.source, opts.Config.Kafka.Distributed.Enabled)
	s.reg.MustRegister(newReleasedCollector(s.store, opts.Config)) // the released values, for Grafana
	s.history = opts.History
	s.selMetrics = newSelectionMetrics(opts.Config, s.source)
	s.reg.MustRegister(s.selMetrics)
	if opts.SelectedReleases <= 0 {
		opts.SelectedReleases = 50 * opts.History
	}
	for _, name := range s.selMetrics.hists {
		s.store.limitReleases(name, opts.SelectedReleases)
	}
	if opts.Config.Selecting() {
		if opts.Plan == nil {
			opts.Plan, _ = plan.DerivePlan(opts.Config) // the stage refuses a config without a plan
		}
		s.plannedSelection = planSelection(opts.Config, opts.Plan)
	}
	page, csp, err := loadPage()
	if err != nil {
		return nil, err
	}
	s.page, s.pageCSP = page, csp
	planned, err := plannedViews(opts.Config, opts.Plan)
	if err != nil {
		// The stage refuses a config without a plan; the page then only
		// lacks the planned views.
		opts.Log.Warn("dashboard: no planned views", zap.Error(err))
	}
	if opts.StartedAt.IsZero() {
		opts.StartedAt = time.Now()
	}
	lay := newLayout(opts.Config, planned, s.plannedSelection)
	lay.StartedAt = opts.StartedAt.UTC().Truncate(time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00")
	s.layout, err = json.Marshal(lay)
	if err != nil {
		return nil, err
	}
	s.handler = s.publicRoutes()
	s.opHandler = s.operatorRoutes()
	return s, nil
}

// Attach makes the server report on src (the stage, once built). Before it,
// /readyz answers 503 and the stage's metrics are absent.
func (s *Server) Attach(src Source) { s.src.Store(&sourceBox{src}) }

func (s *Server) source() Source {
	if b := s.src.Load(); b != nil {
		return b.s
	}
	return nil
}

// OnRelease is the stage's Options.OnRelease: it stores the published
// messages and observes the window-close-to-publish latency (not for units
// republished after a restart, which report 0).
func (s *Server) OnRelease(u *ledger.Unit, closeToPublish time.Duration) {
	s.store.Observe(u)
	s.selMetrics.observe(u)
	if closeToPublish > 0 {
		s.latency.Observe(closeToPublish.Seconds())
	}
}

// Store returns the release store.
func (s *Server) Store() *Store { return s.store }

// Registry returns the server's own Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Handler returns the public surface's handler (for tests and embedding):
// the page, /api/* and the probes.
func (s *Server) Handler() http.Handler { return s.handler }

// OperatorHandler returns the operator surface's handler: /metrics and the
// probes.
func (s *Server) OperatorHandler() http.Handler { return s.opHandler }

// Listen binds addr (host:port; port 0 picks a free port).
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: listen on %s: %w", addr, err)
	}
	return ln, nil
}

// URL is the page address of a listener, for humans: an unspecified host
// (every interface) is shown as 127.0.0.1.
func URL(ln net.Listener) string {
	host, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return "http://" + ln.Addr().String() + "/"
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// Serve serves the public surface (the page, /api/*, the probes) on ln
// until ctx ends, then shuts down gracefully (in-flight requests get
// ShutdownTimeout to finish) and returns. It closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if !s.public.set {
		s.warnOpen(ln, "http: public listener beyond loopback without http.bearer_token: the dashboard and /api (releases and budget only) are open to anyone who can reach this address")
	}
	return s.serve(ctx, ln, s.handler)
}

// ServeOperator serves the operator surface (/metrics, the probes) on ln,
// as Serve does the public one.
func (s *Server) ServeOperator(ctx context.Context, ln net.Listener) error {
	if !s.operator.set {
		s.warnOpen(ln, "http: operator listener beyond loopback without http.operator_token: /metrics (exact event and drop counts, which are private) is open to anyone who can reach this address")
	}
	return s.serve(ctx, ln, s.opHandler)
}

// warnOpen logs msg when ln listens beyond loopback.
func (s *Server) warnOpen(ln net.Listener, msg string) {
	if host, _, err := net.SplitHostPort(ln.Addr().String()); err == nil && !config.IsLoopbackHost(host) {
		s.log.Warn(msg, zap.String("address", ln.Addr().String()))
	}
}

func (s *Server) serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          zap.NewStdLog(s.log.Named("http")),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }() // owner: Serve; ends when srv shuts down
	select {
	case err := <-errc:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdown)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("http: shutdown: %w", err)
	}
	return nil
}

// publicRoutes is the public surface: nothing derived from a count.
func (s *Server) publicRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /api/releases", s.public.auth(http.HandlerFunc(s.releases)))
	mux.Handle("GET /api/budget", s.public.auth(http.HandlerFunc(s.budget)))
	mux.Handle("GET /api/layout", s.public.auth(http.HandlerFunc(s.layoutHandler)))
	mux.Handle("GET /api/selections", s.public.auth(http.HandlerFunc(s.selections)))
	mux.Handle("GET /{$}", s.public.auth(http.HandlerFunc(s.index)))
	return securityHeaders(mux)
}

// operatorRoutes is the operator surface: the metrics, with their counts.
func (s *Server) operatorRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.operatorReadyz)
	mux.Handle("GET /metrics", s.operator.auth(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(s.log), Timeout: 10 * time.Second})))
	return securityHeaders(mux)
}

// securityHeaders applies to every response.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// token is one listener's access control: the SHA-256 of its token (when
// set), compared in constant time.
type token struct {
	sum  [sha256.Size]byte
	set  bool
	name string // the config key, for the 401 message
}

func newToken(tok, name string) token {
	t := token{name: name}
	if tok != "" {
		t.sum, t.set = sha256.Sum256([]byte(tok)), true
	}
	return t
}

// auth requires the token, when one is configured.
func (t token) auth(next http.Handler) http.Handler {
	if !t.set {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t.authorized(r.Header.Get("Authorization")) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Add("WWW-Authenticate", `Bearer realm="dp-stage"`)
		w.Header().Add("WWW-Authenticate", `Basic realm="dp-stage", charset="UTF-8"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized: send Authorization: Bearer <" + t.name + ">"})
	})
}

func (t token) authorized(header string) bool {
	var tok string
	scheme, rest, _ := strings.Cut(header, " ")
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		tok = strings.TrimSpace(rest)
	case strings.EqualFold(scheme, "Basic"):
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
		if err != nil {
			return false
		}
		_, tok, _ = strings.Cut(string(raw), ":")
	default:
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
}

// readiness is the body of /readyz.
type readiness struct {
	Ready bool `json:"ready"`
	pipeline.Readiness
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	rd, code := s.readiness()
	writeJSON(w, code, rd)
}

// operatorReadiness is the body of the operator listener's /readyz: the
// public one's and, with contribution.max_windows_per_user, the histograms
// whose last closed window the bound left blind (its drop share above
// contribution.blind_warning_share). window_bound_blind is not a condition
// of ready — the stage is doing its job; its configuration does not fit
// the traffic — and it is on the operator listener only: whether a share
// passed a threshold is a function of a window's private drop counts, so
// even as a boolean it must not reach the public listener. /readyz stays
// open without a token (a kubelet probe sends none), so with
// http.operator_token the list is shown only to a request that sends the
// token, like /metrics.
//
// connect_error is why connected is false (node.Readiness.ConnectError:
// each broker's dial error — connection refused, no such host —, or a
// failed fetch): on the operator listener only, since it names the
// brokers, and behind http.operator_token like the list above.
type operatorReadiness struct {
	readiness
	WindowBoundBlind []string `json:"window_bound_blind,omitempty"`
	ConnectError     string   `json:"connect_error,omitempty"`
}

func (s *Server) operatorReadyz(w http.ResponseWriter, r *http.Request) {
	rd, code := s.readiness()
	body := operatorReadiness{readiness: rd}
	if s.operator.set && !s.operator.authorized(r.Header.Get("Authorization")) {
		writeJSON(w, code, body)
		return
	}
	body.ConnectError = rd.ConnectError
	if wb, ok := s.source().(windowBoundSource); ok {
		for _, sh := range wb.WindowBound() {
			if sh.Blind {
				body.WindowBoundBlind = append(body.WindowBoundBlind, sh.Histogram)
			}
		}
	}
	writeJSON(w, code, body)
}

// readiness is /readyz's body without the operator's conditions, and its
// status code.
func (s *Server) readiness() (readiness, int) {
	var rd pipeline.Readiness
	if src := s.source(); src != nil {
		rd = src.Readiness()
	}
	code := http.StatusOK
	if !rd.Ready() {
		code = http.StatusServiceUnavailable
	}
	return readiness{Ready: rd.Ready(), Readiness: rd}, code
}

// maxLimit caps /api/releases?limit=.
const maxLimit = 1000

func (s *Server) releases(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	hist, group := q.Get("histogram"), q.Get("group")
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("limit must be a whole number from 1 to %d", maxLimit)})
			return
		}
		limit = n
	}
	if hist != "" || group != "" {
		if !s.declared(hist, group) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such declared histogram/group (see /api/layout)"})
			return
		}
	}
	msgs, version := s.store.Query(hist, group, limit)
	etag := `"` + strconv.FormatUint(version, 10) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && match == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	// The messages are written byte for byte as published: a JSON array of
	// the topic's values.
	var b bytes.Buffer
	b.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteString("]\n")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b.Bytes())
}

// declared reports whether the histogram (if given) and group (if given)
// are declared, the group in that histogram (in any, without histogram).
func (s *Server) declared(hist, group string) bool {
	for _, h := range s.cfg.Histograms {
		if hist != "" && h.Name != hist {
			continue
		}
		if group == "" || h.Selects() {
			// A selecting histogram's groups are open-ended: any name is
			// answered from the store, so that a group never selected
			// answers as one selected long ago (no trace either way).
			return true
		}
		for _, g := range h.GroupNames() {
			if g == group {
				return true
			}
		}
	}
	return false
}

// BudgetView is the body of /api/budget: the period's guarantee and what
// each period seen since the start has spent (every release message
// carries the same numbers).
type BudgetView struct {
	BudgetEpsilon float64 `json:"budget_epsilon"`
	// Delta is privacy.budget.delta: the δ the spent and budget ε are
	// stated at.
	Delta float64 `json:"delta"`
	// TotalDelta is the δ of the guarantee: Delta plus the user-hash
	// collision term 2n·2⁻⁶⁴ for n = privacy.expected_users (what every
	// release carries as privacy.total_delta); omitted without
	// expected_users, whose n the term needs (issue 28 item 5).
	TotalDelta    float64                 `json:"total_delta,omitempty"`
	PeriodSeconds float64                 `json:"period_seconds"`
	Periods       []pipeline.BudgetStatus `json:"periods"`
	// Charging is how a period's budget is charged (public config):
	// ChargingPerWindow, or with contribution.max_windows_per_user
	// ChargingReservation — each histogram's whole period is reserved when
	// its first window of the period closes, so spent_epsilon is near the
	// budget from then on while releases keep coming. Note says so in
	// words (the dashboard shows it).
	Charging string `json:"charging"`
	Note     string `json:"note"`
}

// BudgetView.Charging values, and the notes that go with them.
const (
	ChargingPerWindow   = "per_window"
	ChargingReservation = "period_reservation"

	NotePerWindow   = "each window's releases are charged when the window closes; when the period's budget is used up, releases stop until the next period"
	NoteReservation = "reserved for the period; later releases of the period are covered (with contribution.max_windows_per_user each histogram reserves its period's whole charge when its first window of the period closes: the spend reaches the budget early while releases keep coming)"
	// NoteReservationRefused is NoteReservation when the current period's
	// reservation of some histograms was refused (BudgetStatus.
	// RefusedHistograms, from the budget book): followed by their names.
	NoteReservationRefused = "reserved for the period; later releases of the period are covered, except for the histograms whose reservation was refused — a config change in the middle of the period changed it and the period's budget was already reserved, or the budget was lowered below the period's spend — which are not released until the period ends: "
)

// budgetCharging is how cfg charges a period (BudgetView.Charging).
func budgetCharging(cfg *config.Config) string {
	if cfg.Contribution.MaxWindowsPerUser > 0 {
		return ChargingReservation
	}
	return ChargingPerWindow
}

func (s *Server) budget(w http.ResponseWriter, _ *http.Request) {
	v := BudgetView{
		BudgetEpsilon: s.cfg.Privacy.Budget.Epsilon,
		Delta:         s.cfg.Privacy.Budget.Delta,
		PeriodSeconds: s.cfg.Privacy.Budget.Period.D().Seconds(),
		Periods:       []pipeline.BudgetStatus{},
		Charging:      budgetCharging(s.cfg),
		Note:          NotePerWindow,
	}
	if v.Charging == ChargingReservation {
		v.Note = NoteReservation
	}
	if s.cfg.StatesTotalDelta() {
		v.TotalDelta = s.cfg.TotalDelta()
	}
	if src := s.source(); src != nil {
		if b := src.Budget(); b != nil {
			v.Periods = b
		}
	}
	if n := len(v.Periods); v.Charging == ChargingReservation && n > 0 {
		if refused := v.Periods[n-1].RefusedHistograms; len(refused) > 0 {
			v.Note = NoteReservationRefused + strings.Join(refused, ", ") + " (until " + v.Periods[n-1].PeriodEnd.Format(time.RFC3339) + ")"
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, v)
}

// Layout is the body of /api/layout: the public declarations every release
// is made for (the same names, bins and groups appear in the releases).
type Layout struct {
	Histograms    []LayoutHistogram `json:"histograms"`
	WindowSeconds float64           `json:"window_seconds"`
	Mechanism     string            `json:"mechanism"`
	Calibration   string            `json:"calibration,omitempty"`
	// IntervalLevel is output.interval_level: the level of the releases'
	// intervals, which the page draws as the bars' bands.
	IntervalLevel float64 `json:"interval_level"`
	// BudgetCharging is BudgetView.Charging (public config), for the
	// page's explanations.
	BudgetCharging string `json:"budget_charging"`
	// StartedAt is when this stage process started (RFC 3339, UTC). The
	// page marks the windows in progress then (window_start < started_at
	// < window_end): they may hold only part of their events — with the
	// demo's generator, which starts with the stage, they do. The start
	// time is public, not private: it is a fact about the deployment, not
	// about any user's events, and when windows begin to be released
	// shows it anyway.
	StartedAt string `json:"started_at"`
}

// LayoutHistogram is one declared histogram.
type LayoutHistogram struct {
	Name   string   `json:"name"`
	Bins   []string `json:"bins"`
	Groups []string `json:"groups"`
	// WindowSeconds is the histogram's own window (histograms[].window, else
	// window.size): how often it is released.
	WindowSeconds float64 `json:"window_seconds"`
	// MaxWindowsPerUser is the histogram's cross-window bound K_h (public
	// config: config.Config.HistWindowBound) and WindowsPerPeriod its
	// windows per budget period: a user counts in at most
	// MaxWindowsPerUser of them. Absent without the bound.
	MaxWindowsPerUser int `json:"max_windows_per_user,omitempty"`
	WindowsPerPeriod  int `json:"windows_per_period,omitempty"`
	// Planned is the plan's prediction for the view at the public
	// planning figures (count histograms, with
	// privacy.expected_windows_per_user): public config only, never the
	// data.
	Planned *PlannedView `json:"planned,omitempty"`
	// Selection is set when the histogram selects its groups (group_by
	// without groups; Groups is then empty): the plan's selection
	// parameters in words (public config). /api/selections lists the
	// selected groups per window.
	Selection *SelectionView `json:"selection,omitempty"`
	Selects   bool           `json:"selects,omitempty"`
}

// newLayout is /api/layout for cfg, with the planned views (config index
// → prediction; nil without them). A function of the public
// configuration only.
func newLayout(cfg *config.Config, planned map[int]*PlannedView, sel *release.Selection) Layout {
	l := Layout{
		WindowSeconds: cfg.Window.Size.D().Seconds(),
		Mechanism:     cfg.Privacy.Mechanism,
		IntervalLevel: cfg.Output.IntervalLevel,
	}
	l.BudgetCharging = budgetCharging(cfg)
	if cfg.Privacy.Mechanism == config.MechanismDirichlet {
		l.Calibration = cfg.Privacy.Calibration
	}
	for i, h := range cfg.Histograms {
		lh := LayoutHistogram{Name: h.Name, Bins: h.Bins, Groups: h.GroupNames(),
			WindowSeconds: h.WindowSize(cfg.Window.Size).D().Seconds()}
		if k, size := cfg.HistWindowBound(i), h.WindowSize(cfg.Window.Size); k > 0 && size > 0 {
			lh.MaxWindowsPerUser, lh.WindowsPerPeriod = k, int(cfg.Privacy.Budget.Period/size)
		}
		lh.Planned = planned[i]
		if h.Selects() {
			lh.Groups, lh.Selects = []string{}, true
			if sel != nil {
				lh.Selection = newSelectionView(*sel)
			}
		}
		l.Histograms = append(l.Histograms, lh)
	}
	return l
}

func (s *Server) layoutHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(s.layout)
}

func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", s.pageCSP)
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(s.page)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":"encoding"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
