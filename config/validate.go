package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Problem is one thing wrong with a config file.
type Problem struct {
	// Path is the YAML path of the offending value, e.g.
	// "histograms[1].bins"; empty for the document as a whole.
	Path string
	// Message says what is wrong. It never contains a value that came from
	// the environment.
	Message string
	// Line is the 1-based line in the file of the offending value (or of
	// its nearest enclosing key the file gave); 0 when the value is not in
	// a file (a Config built in Go, or a default).
	Line int
}

// String formats the problem as "path: line N: message" (parts omitted when
// empty).
func (p Problem) String() string {
	var b strings.Builder
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	b.WriteString(p.Message)
	return b.String()
}

// ValidationError lists every problem found in a config.
type ValidationError struct {
	Problems []Problem
}

// Error lists the problems one per line, after a count.
func (e *ValidationError) Error() string {
	var b strings.Builder
	if len(e.Problems) == 1 {
		b.WriteString("invalid config: 1 problem")
	} else {
		fmt.Fprintf(&b, "invalid config: %d problems", len(e.Problems))
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

type checker struct {
	c     *Config
	probs []Problem
}

// add records a problem at path. A check that reads another section must
// name that section's key in its message ("must be a whole multiple of
// window.size"): that is how checkAroundSyntax leaves out problems that may
// come from a section it skipped.
func (k *checker) add(path, format string, args ...any) {
	k.probs = append(k.probs, Problem{Path: path, Message: fmt.Sprintf(format, args...), Line: k.c.lineOf(path)})
}

// show quotes a value for a message, unless it came from the environment.
func (k *checker) show(path, value string) string {
	if k.c.fromEnvOrParent(path) {
		return "(value from the environment)"
	}
	return strconv.Quote(value)
}

func (c *Config) fromEnvOrParent(path string) bool {
	if c.fromEnv(path) {
		return true
	}
	if i := strings.LastIndexByte(path, '['); i > 0 && strings.HasSuffix(path, "]") {
		return c.fromEnv(path[:i])
	}
	return false
}

func (k *checker) nonEmpty(path, v string) bool {
	if v == "" {
		k.add(path, "must not be empty")
		return false
	}
	return true
}

func (k *checker) atLeast1(path string, v int) {
	if v < 1 {
		k.add(path, "must be at least 1")
	}
}

func (k *checker) oneOf(path, v string, allowed []string) bool {
	if slices.Contains(allowed, v) {
		return true
	}
	if v == "" {
		k.add(path, "must be one of %s", strings.Join(allowed, ", "))
	} else {
		k.add(path, "must be one of %s, got %s", strings.Join(allowed, ", "), k.show(path, v))
	}
	return false
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Validate checks the whole configuration and reports every problem at once
// as a *[ValidationError] (nil when there is none), each with its YAML path.
// It expects defaults to have been applied ([Parse] and [Load] do). It reads
// the TLS files named by an enabled kafka.tls, and nothing else outside the
// Config.
func (c *Config) Validate() error {
	k := &checker{c: c}
	k.kafka()
	k.events()
	k.window()
	k.histograms()
	k.contribution()
	k.histBounds()
	k.privacy()
	k.selection()
	k.activity()
	k.intervals()
	k.budgetShares()
	k.nonEmpty("state.dir", c.State.Dir)
	k.stateLedger()
	k.distributed()
	k.oneOf("log.format", c.Log.Format, logFormats)
	k.oneOf("log.level", c.Log.Level, logLevels)
	k.generator()
	k.http()
	if len(k.probs) == 0 {
		return nil
	}
	return &ValidationError{Problems: k.probs}
}

// topicName is Kafka's rule for topic names.
var topicName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

func (k *checker) topic(path, v string) {
	if !k.nonEmpty(path, v) {
		return
	}
	if !topicName.MatchString(v) || v == "." || v == ".." {
		k.add(path, "%s is not a valid Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -)", k.show(path, v))
	}
}

func (k *checker) kafka() {
	kc := &k.c.Kafka
	for i, b := range kc.Brokers {
		path := fmt.Sprintf("kafka.brokers[%d]", i)
		host, port, err := net.SplitHostPort(b)
		p, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
			k.add(path, "%s is not host:port (port 1 to 65535)", k.show(path, b))
		}
	}
	k.nonEmpty("kafka.group_id", kc.GroupID)
	k.topic("kafka.input_topic", kc.InputTopic)
	k.topic("kafka.output_topic", kc.OutputTopic)
	if kc.OutputTopic != "" && kc.OutputTopic == kc.InputTopic {
		k.add("kafka.output_topic", "must differ from kafka.input_topic")
	}
	if kc.DeadLetterTopic != "" {
		k.topic("kafka.dead_letter_topic", kc.DeadLetterTopic)
		if kc.DeadLetterTopic == kc.InputTopic {
			k.add("kafka.dead_letter_topic", "must differ from kafka.input_topic")
		}
		if kc.DeadLetterTopic == kc.OutputTopic {
			k.add("kafka.dead_letter_topic", "must differ from kafka.output_topic")
		}
	}
	k.atLeast1("kafka.input_partitions", kc.InputPartitions)
	if kc.EmbeddedPort < 0 || kc.EmbeddedPort > 65535 {
		k.add("kafka.embedded_port", "must be a port from 1 to 65535, or 0 for a free one")
	}
	if kc.SessionTimeout < Duration(500*time.Millisecond) {
		k.add("kafka.session_timeout", "must be at least 500ms")
	}
	if kc.RebalanceTimeout < 0 || kc.RebalanceTimeout > 0 && kc.RebalanceTimeout < Duration(250*time.Millisecond) {
		k.add("kafka.rebalance_timeout", "must be at least 250ms (or 0: half of kafka.session_timeout)")
	} else if kc.RebalanceTimeout > kc.SessionTimeout {
		k.add("kafka.rebalance_timeout", "must not exceed kafka.session_timeout")
	}
	k.tls()
	k.sasl()
}

func (k *checker) tls() { k.tlsAt("kafka.tls", k.c.Kafka.TLS) }

// tlsAt checks the TLS block t found at path p (kafka.tls,
// events.schema_registry.tls).
func (k *checker) tlsAt(p string, t TLS) {
	if !t.Enabled {
		return
	}
	caOK := t.CAFile == "" || k.readable(p+".ca_file", t.CAFile)
	certOK := t.CertFile == "" || k.readable(p+".cert_file", t.CertFile)
	keyOK := t.KeyFile == "" || k.readable(p+".key_file", t.KeyFile)
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		k.add(p+".key_file", "required with %s.cert_file", p)
		keyOK = false
	case t.KeyFile != "" && t.CertFile == "":
		k.add(p+".cert_file", "required with %s.key_file", p)
		certOK = false
	}
	if t.CAFile != "" && caOK {
		if _, err := loadCAPool(t.CAFile); err != nil {
			k.add(p+".ca_file", "%v", err)
		}
	}
	if t.CertFile != "" && t.KeyFile != "" && certOK && keyOK {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			k.add(p+".cert_file", "cannot load the key pair with %s.key_file: %s", p, safeTLSError(err))
		}
	}
}

// readable reports whether the file at name can be read, and a problem
// (without the name, which may come from the environment) if not.
func (k *checker) readable(path, name string) bool {
	f, err := os.Open(name)
	if err == nil {
		var st fs.FileInfo
		st, err = f.Stat()
		if err == nil && st.IsDir() {
			err = errors.New("is a directory")
		}
		f.Close()
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		k.add(path, "cannot read %s: %v", k.show(path, name), err)
		return false
	}
	return true
}

func loadCAPool(name string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(name)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("cannot read the file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}

// safeTLSError strips file names from crypto/tls errors.
func safeTLSError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func (k *checker) sasl() {
	s := k.c.Kafka.SASL
	if s.Mechanism == "" && s.Username == "" && s.Password == "" {
		return
	}
	k.oneOf("kafka.sasl.mechanism", s.Mechanism, saslMechs)
	k.nonEmpty("kafka.sasl.username", s.Username)
	if s.Password == "" {
		k.add("kafka.sasl.password", "must be set (through a ${ENV_VAR} reference)")
	}
}

func (k *checker) events() {
	e := k.c.Events
	k.oneOf("events.format", e.Format, formats)
	if k.nonEmpty("events.time_field", e.TimeField) {
		k.fieldPath("events.time_field", e.TimeField, roleTime)
	}
	if k.nonEmpty("events.user_field", e.UserField) {
		k.fieldPath("events.user_field", e.UserField, roleUser)
		if e.UserField == e.TimeField {
			k.add("events.user_field", "must differ from events.time_field")
		}
	}
	k.atLeast1("events.max_message_bytes", e.MaxMessageBytes)
	k.schemas()
}

func (k *checker) window() {
	w := k.c.Window
	if w.Size <= 0 {
		k.add("window.size", "must be greater than 0")
	}
	if w.AllowedLateness < 0 {
		k.add("window.allowed_lateness", "must not be negative")
	}
	if w.IdlePartitionTimeout <= 0 {
		k.add("window.idle_partition_timeout", "must be greater than 0")
	}
	if k.c.Events.MaxFuture <= 0 {
		k.add("events.max_future", "must be greater than 0")
	}
	if k.c.State.Retain < 0 {
		k.add("state.retain", "must not be negative (0: keep everything)")
	}
	if w.CloseAfter < 0 {
		k.add("window.close_after", "must not be negative (0: use allowed_lateness)")
	}
	if k.oneOf("window.watermark", w.Watermark, watermarks) && w.Watermark == WatermarkEvent && w.CloseAfter > 0 {
		k.add("window.close_after", "closes windows by arrival; it cannot be combined with watermark: event (remove one)")
	}
	if w.ClockSkewMargin < 0 {
		k.add("window.clock_skew_margin", "must not be negative (0: trust every clock to agree exactly)")
	}
	if w.RecordTimes != "" { // "": broker
		k.oneOf("window.record_times", w.RecordTimes, recordTimes)
	}
	if w.Start != "" {
		if _, err := time.Parse(time.RFC3339, w.Start); err != nil {
			k.add("window.start", "must be an RFC 3339 time such as 2026-01-01T00:00:00Z")
		}
	}
}

func (k *checker) histograms() {
	hs := k.c.Histograms
	if len(hs) == 0 {
		k.add("histograms", "must declare at least one histogram")
		return
	}
	names := map[string]int{}
	for i, h := range hs {
		p := fmt.Sprintf("histograms[%d]", i)
		if k.nonEmpty(p+".name", h.Name) {
			if strings.Contains(h.Name, "/") {
				k.add(p+".name", "must not contain / (output keys are histogram/group)")
			}
			if j, dup := names[h.Name]; dup {
				k.add(p+".name", "duplicate histogram name %s (also histograms[%d])", k.show(p+".name", h.Name), j)
			} else {
				names[h.Name] = i
			}
		}
		if k.nonEmpty(p+".field", h.Field) {
			role := roleValue
			if h.Kind == KindAverage {
				role = roleVector
			}
			k.fieldPath(p+".field", h.Field, role)
		}
		k.list(p+".bins", "bin", h.Bins)
		if len(h.Bins) < 2 {
			k.add(p+".bins", "must list at least 2 bins")
		}
		if h.OverflowBin != "" && !slices.Contains(h.Bins, h.OverflowBin) {
			k.add(p+".overflow_bin", "%s is not among the bins", k.show(p+".overflow_bin", h.OverflowBin))
		}
		k.histWindow(p, h)
		switch h.Kind {
		case KindCount, "":
		case KindAverage:
			k.average(p, h)
			continue
		default:
			k.add(p+".kind", "must be count or average, got %s", k.show(p+".kind", h.Kind))
		}
		switch {
		case h.GroupBy != "":
			if h.GroupBy == h.Field {
				k.add(p+".group_by", "must differ from field")
			}
			k.fieldPath(p+".group_by", h.GroupBy, roleValue)
			if len(h.Groups) > 0 { // none: selected privately (Selects)
				k.list(p+".groups", "group", h.Groups)
			}
		case len(h.Groups) > 0:
			k.add(p+".groups", "given without group_by")
		}
	}
}

// histWindow checks histograms[i].window: a whole multiple of window.size
// that divides the budget period.
func (k *checker) histWindow(p string, h Histogram) {
	w := h.Window
	if w == 0 {
		return
	}
	base, period := k.c.Window.Size, k.c.Privacy.Budget.Period
	switch {
	case w < 0:
		k.add(p+".window", "must be greater than 0 (or left out: window.size)")
	case base > 0 && w%base != 0:
		k.add(p+".window", "must be a whole multiple of window.size (%s), got %s", base, w)
	case period > 0 && period%w != 0:
		k.add(p+".window", "must divide privacy.budget.period (%s), got %s", period, w)
	}
}

// histBounds checks histograms[].max_windows_per_user (Histogram.
// MaxWindowsPerUser): only with the bound on, between 1 and the
// histogram's windows per period, required for a histogram with a coarser
// window under the bound, and equal among histograms of one window size
// (they share one admission state: a user's windows of that size).
func (k *checker) histBounds() {
	c := k.c
	base, period := c.Window.Size, c.Privacy.Budget.Period
	on := c.Contribution.MaxWindowsPerUser > 0
	first := map[Duration]int{} // window size → first histogram index with a bound
	for i, h := range c.Histograms {
		p := fmt.Sprintf("histograms[%d].max_windows_per_user", i)
		size := h.WindowSize(base)
		windows := 0 // the histogram's windows per period; 0 when not computable
		if size > 0 && period > 0 && period%size == 0 && (base <= 0 || size%base == 0) {
			windows = int(period / size)
		}
		switch kh := h.MaxWindowsPerUser; {
		case kh < 0:
			k.add(p, "must be ≥ 1, or left out for the default (contribution.max_windows_per_user at window.size)")
			continue
		case kh > 0 && !on:
			k.add(p, "needs contribution.max_windows_per_user: the cross-window bound is off (set contribution.max_windows_per_user, the bound of the histograms at window.size, too)")
			continue
		case kh > 0 && windows > 0 && kh > windows:
			k.add(p, "must be at most %d, the histogram's windows (%s) per privacy.budget.period (%s); %d is every window", windows, size, period, windows)
			continue
		case kh == 0 && on && size != base && windows > 0:
			k.add(p, "required with contribution.max_windows_per_user for a histogram with its own window (%s, %d per privacy.budget.period): contribution.max_windows_per_user (%d) counts windows of window.size (%s), not of this histogram; set how many of its %d windows per period one user counts in (%d: every window)",
				size, windows, c.Contribution.MaxWindowsPerUser, base, windows, windows)
			continue
		}
		if !on {
			continue
		}
		if j, ok := first[size]; ok {
			if kj, kh := c.HistWindowBound(j), c.HistWindowBound(i); kj != kh {
				k.add(p, "is %d but histograms[%d] (%s), with the same window (%s), is bounded by %d: histograms of one window share one bound (one admission state per window size); set the same value", kh, j, c.Histograms[j].Name, size, kj)
			}
		} else {
			first[size] = i
		}
	}
}

// maxAverageCells bounds users × bins of an average histogram: the memory one
// window holds for it (8 bytes per cell, plus a few words per user).
const maxAverageCells = 50_000_000

// average checks an average histogram (its name, field and bins are checked
// by the caller).
func (k *checker) average(p string, h Histogram) {
	if h.OverflowBin != "" {
		k.add(p+".overflow_bin", "not allowed for kind average (every coordinate is a declared bin)")
	}
	if h.GroupBy != "" || len(h.Groups) > 0 {
		k.add(p+".group_by", "not supported for kind average (a user moving between groups would change two releases); remove group_by and groups")
	}
	a := h.Average
	switch {
	case a.Users < 1:
		k.add(p+".average.users", "required: the public number of users averaged per window (≥ 1)")
	case len(h.Bins) >= 2 && a.Users > maxAverageCells/len(h.Bins):
		k.add(p+".average.users", "%d users × %d bins exceeds %d cells held per window; lower users", a.Users, len(h.Bins), maxAverageCells)
	}
	if !(a.K > 0) || math.IsInf(a.K, 0) {
		k.add(p+".average.k", "required: the Dirichlet concentration, finite and > 0")
	}
	if n := len(h.Bins); n >= 2 && !(a.Eta > 0 && a.Eta*float64(n) < 1) {
		k.add(p+".average.eta", "must be in (0, 1/%d) (1/number of bins)", n)
	}
	if !(a.Delta >= 0 && a.Delta < 1) {
		k.add(p+".average.delta", "must be in (0, 1), or 0 for the default share of privacy.budget.delta")
	}
}

// list reports empty and duplicate entries of a bins or groups list.
func (k *checker) list(path, what string, items []string) {
	first := map[string]int{}
	for i, v := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		if v == "" {
			k.add(p, "%s must not be empty", what)
			continue
		}
		if j, dup := first[v]; dup {
			k.add(p, "duplicate %s %s (also %s[%d])", what, k.show(p, v), path[strings.LastIndexByte(path, '.')+1:], j)
			continue
		}
		first[v] = i
	}
}

func (k *checker) contribution() {
	c := k.c.Contribution
	k.atLeast1("contribution.max_events_per_user", c.MaxEventsPerUser)
	k.atLeast1("contribution.max_groups_per_user", c.MaxGroupsPerUser)
	if c.MaxTrackedUsers < 0 {
		k.add("contribution.max_tracked_users", "must be ≥ 0 (0: no cap)")
	}
	switch w := c.MaxWindowsPerUser; {
	case w < 0:
		k.add("contribution.max_windows_per_user", "must be ≥ 0 (0: no bound)")
	case w > maxWindowsPerUser:
		k.add("contribution.max_windows_per_user", "must be at most %d", maxWindowsPerUser)
	}
	if s := c.BlindWarningShare; !(s > 0 && s <= 1) {
		k.add("contribution.blind_warning_share", "must be a share in (0, 1], got %v (the share of a window's contributions dropped by max_windows_per_user above which the stage warns; 1 turns the warning off)", s)
	}
	if c.MaxWindowsPerUser > 0 && c.MaxTrackedUsers > 0 {
		k.add("contribution.max_tracked_users", "cannot be combined with contribution.max_windows_per_user: a user the cross-window bound later drops could have displaced another user from a capped window; remove max_tracked_users (with max_windows_per_user the bounder keeps every user of a window: about 42 bytes per active (user, window) for one histogram, 59 for two, plus 30 per (user, period) for the bound's state)")
	}
}

// maxWindowsPerUser is the largest cross-window bound accepted (the
// admission state counts a user's windows of a period in a uint16).
const maxWindowsPerUser = 65535

func (k *checker) privacy() {
	p := k.c.Privacy
	k.oneOf("privacy.mechanism", p.Mechanism, mechanisms)
	switch p.Mechanism {
	case MechanismDirichlet:
		k.oneOf("privacy.calibration", p.Calibration, calibrations)
		if p.Calibration == CalibrationOptimal && !(p.ExpectedEventsPerRelease > 0) {
			k.add("privacy.calibration", "optimal needs privacy.expected_events_per_release: the events one release typically counts (a public planning figure)")
		}
	case MechanismGaussian, MechanismLaplace, MechanismLaplacePosterior:
		if p.Calibration != "" && p.Calibration != DefaultCalibration {
			k.add("privacy.calibration", "only applies to mechanism dirichlet; leave it out")
		}
	}
	if p.Mechanism == MechanismLaplacePosterior {
		if !finite(p.PriorAlpha) || p.PriorAlpha <= 0 || p.PriorAlpha > 1e12 {
			k.add("privacy.prior_alpha", "must be a finite number greater than 0 and at most 1e12")
		}
	} else if p.PriorAlpha != 0 {
		// 0 is what an absent key reads as (and what Config.String writes).
		k.add("privacy.prior_alpha", "only applies to mechanism laplace-posterior; leave it out")
	}
	k.oneOf("privacy.neighbour", p.Neighbour, neighbours)
	if !finite(p.RDPEpsilon) || p.RDPEpsilon < 0 {
		k.add("privacy.rdp_epsilon", "must be a finite number ≥ 0 (0: plan from the budget)")
	}
	if !finite(p.Order) || p.Order <= 1 {
		k.add("privacy.order", "must be a finite number greater than 1")
	}
	b := p.Budget
	if !finite(b.Epsilon) || b.Epsilon <= 0 {
		if b.Epsilon == 0 && !k.c.isSet("privacy.budget.epsilon") {
			k.add("privacy.budget.epsilon", "required: a finite number greater than 0")
		} else {
			k.add("privacy.budget.epsilon", "must be a finite number greater than 0")
		}
	}
	switch {
	case !finite(b.Delta) || b.Delta <= 0 || b.Delta >= 1:
		k.add("privacy.budget.delta", "must be a finite number strictly between 0 and 1")
	case b.Delta > MaxDelta:
		k.add("privacy.budget.delta", "%g is above %g: δ is the chance the guarantee fails outright (publishing every user's events in the clear with probability δ meets it), so it must be far below 1/users; use 1e-6 or smaller", b.Delta, MaxDelta)
	case p.ExpectedUsers > 0 && k.c.TotalDelta()*float64(p.ExpectedUsers) >= 1:
		// The total: δ plus the user hashes' collision term (CollisionDelta).
		k.add("privacy.budget.delta", "%g is at least 1/privacy.expected_users (δ·users = %.3g): a mechanism that publishes one user's events in the clear meets such a guarantee; use δ ≤ %.3g (δ·users counts the total δ, with the user-hash collision term 2n·2⁻⁶⁴)", b.Delta, k.c.TotalDelta()*float64(p.ExpectedUsers), DeltaUsersWarn/float64(p.ExpectedUsers))
	}
	if !finite(p.ExpectedEventsPerRelease) || p.ExpectedEventsPerRelease < 0 || p.ExpectedEventsPerRelease > 1e15 {
		k.add("privacy.expected_events_per_release", "must be a finite number ≥ 0 and at most 1e15 (0: not given)")
	}
	if p.ExpectedUsers < 0 {
		k.add("privacy.expected_users", "must be ≥ 0 (0: not given)")
	}
	switch {
	case b.Period <= 0:
		k.add("privacy.budget.period", "must be greater than 0")
	case k.c.Window.Size > 0 && b.Period%k.c.Window.Size != 0:
		k.add("privacy.budget.period", "must be a whole multiple of window.size (%s), got %s: choose a period of whole windows (e.g. %s) or a window.size that divides %s",
			k.c.Window.Size, b.Period, k.c.Window.Size*(b.Period/k.c.Window.Size+1), b.Period)
	}
}

// activity checks privacy.expected_windows_per_user: absent (0: not
// given; Config.String leaves it out) or a finite number of windows greater
// than 0 and at most the windows of one budget period. A written 0 is
// refused like any number ≤ 0.
func (k *checker) activity() {
	const path = "privacy.expected_windows_per_user"
	m := k.c.Privacy.ExpectedWindowsPerUser
	if m == 0 {
		if k.c.written(path) {
			k.add(path, "must be greater than 0, got 0: the %dth percentile of how many windows of a budget period one user is active in (leave the key out when you do not know it)", ActivityPercentile)
		}
		return // not given
	}
	size, period := k.c.Window.Size, k.c.Privacy.Budget.Period
	switch {
	case !finite(m):
		k.add(path, "must be a finite number of windows, got %v", m)
	case m < 0:
		k.add(path, "must be greater than 0 (or 0: not given), got %v: the %dth percentile of how many windows of a budget period one user is active in (leave it out when you do not know it)", m, ActivityPercentile)
	case size > 0 && period > 0 && period%size == 0 && m > float64(int64(period/size)):
		k.add(path, "must be at most the %d windows of window.size (%s) in one privacy.budget.period (%s), got %v", int64(period/size), size, period, m)
	}
}

func (k *checker) generator() {
	g := k.c.Generator
	if !finite(g.TimeScale) {
		k.add("generator.time_scale", "must be a finite number")
	}
	if !g.Enabled {
		return
	}
	k.atLeast1("generator.users", g.Users)
	if g.UserLifetime < 0 {
		k.add("generator.user_lifetime", "must not be negative (0: users live for the whole stream)")
	}
	k.atLeast1("generator.events_per_second", g.EventsPerSecond)
	if finite(g.TimeScale) && g.TimeScale < 1 {
		k.add("generator.time_scale", "must be at least 1")
	}
}

func (k *checker) http() {
	h := k.c.HTTP
	pubHost, pubPort, pubOK := k.listenAddress("http.address", h.Address)
	if pubOK && !h.AllowRemote && !IsLoopbackHost(pubHost) {
		k.add("http.address", "%s listens beyond loopback: set http.allow_remote: true to expose the dashboard and /api to the network (and consider http.bearer_token)",
			k.show("http.address", h.Address))
	}
	opHost, opPort, opOK := k.listenAddress("http.operator_address", h.OperatorAddress)
	if opOK && !h.OperatorAllowRemote && !IsLoopbackHost(opHost) {
		k.add("http.operator_address", "%s listens beyond loopback: /metrics carries exact event and drop counts, which are private; set http.operator_allow_remote: true to expose them to the network on purpose (and set http.operator_token)",
			k.show("http.operator_address", h.OperatorAddress))
	}
	if pubOK && opOK && pubPort == opPort && pubPort != 0 && hostsOverlap(pubHost, opHost) {
		k.add("http.operator_address", "%s is the listener of http.address (%s): the operator surface (/metrics) is served apart from the dashboard's; give it another port (default %s) or turn it off with \"\"",
			k.show("http.operator_address", h.OperatorAddress), k.show("http.address", h.Address), DefaultHTTPOperatorAddress)
	}
	if h.OperatorToken != "" && h.OperatorToken == h.BearerToken {
		k.add("http.operator_token", "is the same as http.bearer_token: the dashboard's readers would hold the operators' token; give the operator listener a token of its own")
	}
}

// listenAddress checks the host:port of a listener at path ("" is off:
// ok false, no problem).
func (k *checker) listenAddress(path, addr string) (host string, port int, ok bool) {
	if addr == "" {
		return "", 0, false // explicitly off
	}
	host, ps, err := net.SplitHostPort(addr)
	p, perr := strconv.Atoi(ps)
	if err != nil || perr != nil || p < 0 || p > 65535 {
		k.add(path, "%s is not host:port (port 0 to 65535)", k.show(path, addr))
		return "", 0, false
	}
	return host, p, true
}

// hostsOverlap reports whether two listen hosts can share an interface:
// the same host, either one every interface ("", 0.0.0.0, ::), or both
// loopback.
func hostsOverlap(a, b string) bool {
	any := func(h string) bool {
		ip := net.ParseIP(h)
		return h == "" || (ip != nil && ip.IsUnspecified())
	}
	return strings.EqualFold(a, b) || any(a) || any(b) || (IsLoopbackHost(a) && IsLoopbackHost(b))
}

// IsLoopbackHost reports whether host (as in host:port; brackets removed)
// names only the loopback interface: "localhost", 127.0.0.0/8 or ::1. An
// empty host (every interface) is not loopback.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var ledgerKinds = []string{LedgerBolt, LedgerKafka}

// stateLedger checks state.ledger and state.ledger_topic.
func (k *checker) stateLedger() {
	st, kc := &k.c.State, &k.c.Kafka
	if !k.oneOf("state.ledger", st.Ledger, ledgerKinds) || st.Ledger != LedgerKafka {
		return
	}
	if st.LedgerTopic == "" {
		k.add("state.ledger_topic", "must be set when state.ledger is kafka (a topic with cleanup.policy=compact, one per consumer group)")
		return
	}
	k.topic("state.ledger_topic", st.LedgerTopic)
	for _, t := range []struct{ path, name string }{
		{"kafka.input_topic", kc.InputTopic}, {"kafka.output_topic", kc.OutputTopic}, {"kafka.dead_letter_topic", kc.DeadLetterTopic},
	} {
		if t.name != "" && t.name == st.LedgerTopic {
			k.add("state.ledger_topic", "must differ from %s", t.path)
		}
	}
	if len(kc.Brokers) == 0 {
		k.add("state.ledger", "kafka needs kafka.brokers: the embedded broker lives and dies with this process, so a release log on it survives nothing the bolt ledger does not")
	}
}

var partitioners = []string{PartitionerMurmur2, PartitionerFNV1a}

// distributed checks kafka.distributed and what it cannot run with yet.
func (k *checker) distributed() {
	d := &k.c.Kafka.Distributed
	if !d.Enabled {
		return
	}
	k.oneOf("kafka.distributed.partitioner", d.Partitioner, partitioners)
	if d.PartialsFormat != "" { // "" in a Config built in code: arrow
		k.oneOf("kafka.distributed.partials_format", d.PartialsFormat, []string{PartialsArrow, PartialsJSON})
	}
	if d.InternalTopicPrefix != "" {
		k.topic("kafka.distributed.internal_topic_prefix", d.InternalTopicPrefix+"partials")
	}
	if d.ReplicationFactor < 0 {
		k.add("kafka.distributed.replication_factor", "must be 0 (min(3, brokers)) or positive")
	}
	if t := d.TransactionTimeout.D(); t != 0 && (t < MinTransactionTimeout || t > MaxTransactionTimeout) {
		k.add("kafka.distributed.transaction_timeout", "must be from %v to %v (the broker's transaction.max.timeout.ms default), got %v",
			MinTransactionTimeout, MaxTransactionTimeout, t)
	}
	if d.PartitionChangeGrace < 0 {
		k.add("kafka.distributed.partition_change_grace", "must not be negative (at least the producers' metadata max age, 5m by default), got %v", d.PartitionChangeGrace.D())
	}
	if k.c.State.Ledger != LedgerKafka {
		k.add("kafka.distributed", "needs state.ledger: kafka (the release log must move with the releasing instance, to any machine)")
	}
	kc := &k.c.Kafka
	for _, t := range []struct{ path, name string }{
		{"kafka.input_topic", kc.InputTopic}, {"kafka.output_topic", kc.OutputTopic}, {"kafka.dead_letter_topic", kc.DeadLetterTopic}, {"state.ledger_topic", k.c.State.LedgerTopic},
	} {
		if t.name != "" && (t.name == kc.PartialsTopic() || t.name == kc.ProgressTopic()) {
			k.add("kafka.distributed.internal_topic_prefix", "the internal topics %s and %s must differ from %s", kc.PartialsTopic(), kc.ProgressTopic(), t.path)
		}
	}
	// contribution.max_tracked_users holds per (window, input partition)
	// here: plan/distcap.go.
	// A partial carries every non-zero (histogram, group, bin) count of its
	// window: at most ~24 bytes of JSON each, under Kafka's default 1 MB
	// record limit.
	// An average histogram's partial carries up to average.users kept
	// users, each a hash and a vector (partial/averages.go).
	cells := 0
	for _, h := range k.c.Histograms {
		if h.IsAverage() {
			cells += max(1, h.Average.Users) * (len(h.Bins) + 1)
			continue
		}
		cells += max(1, len(h.Groups)) * (len(h.Bins) + 1)
	}
	if cells > MaxDistributedCells {
		k.add("histograms", "have %d (group, bin) cells in all (an average histogram: average.users × (bins + 1)), more than the %d one partial record of kafka.distributed can carry under Kafka's default 1 MB record limit: fewer groups, bins or average users", cells, MaxDistributedCells)
	}
}
