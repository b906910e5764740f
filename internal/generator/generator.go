// Package generator produces the synthetic page-view stream of the demo, the
// benchmarks and the end-to-end tests: flat JSON events of about 120 bytes,
//
//	{"ts":1700000000000,"user_id":"u42","page":"home","country":"US","device":"mobile","session":"5f1c9e0d2b7a4c31","seq":17}
//
// over a population of users whose activity is Zipf-skewed (a few users send
// many events), with skewed pages and countries. Each user lives in one
// country. The stream is keyed by user_id, so one user's events land on one
// partition, in order. The same events can be written in Avro or Protobuf
// in the Confluent wire format instead (Config.Format; encode.go).
//
// The stream is a pure function of the Config: event i is computed from
// (Seed, i) alone, so any prefix can be replayed (Event, Events, Fill) and
// the true counts of what was produced recomputed (Truth) without recording
// anything. Event time follows a fixed schedule: event i happens at
// Start + i·TimeScale/EventsPerSecond (minus an optional random Disorder), and
// Run writes event i at wall time i/EventsPerSecond after it starts, so event
// time runs TimeScale times faster than the wall clock.
//
// This is synthetic data, not noise: math/rand/v2 (PCG) is the right tool,
// and the privacy mechanism never uses it.
package generator

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/lib/retry"
)

// Pages, Countries and Devices are the values the generator emits, in the
// order of the declared bins of the demo configuration.
var (
	Pages     = []string{"home", "search", "cart", "checkout", "other"}
	Countries = []string{"US", "DE", "FR"}
	Devices   = []string{"mobile", "desktop", "tablet"}
)

// The skew of pages, countries and devices: relative weights, same order as
// Pages, Countries, Devices.
var (
	pageWeights    = []float64{40, 25, 15, 8, 12}
	countryWeights = []float64{55, 30, 15}
	deviceWeights  = []float64{60, 32, 8}
)

// TimeFormat selects how "ts" is written.
type TimeFormat int

const (
	// EpochMillis writes "ts" as a JSON number of Unix milliseconds.
	EpochMillis TimeFormat = iota
	// RFC3339 writes "ts" as an RFC 3339 string with milliseconds, in UTC.
	RFC3339
)

// Config configures a Generator. The zero value of a field means its
// documented default.
type Config struct {
	// Users in the population. Default 300.
	Users int
	// EventsPerSecond is the wall-clock rate of Run, and with TimeScale
	// fixes the event-time spacing. Default 200.
	EventsPerSecond int
	// TimeScale: event time advances this many times faster than the wall
	// clock. Default 1.
	TimeScale float64
	// Start is the event time of event 0, truncated to the millisecond.
	// Default: the time New is called.
	Start time.Time
	// Seed selects the stream; equal Configs give equal streams.
	Seed uint64
	// Skew is the Zipf exponent of user activity: user of rank k (0-based)
	// is drawn with weight 1/(k+1)^Skew. Default 1.1; negative means
	// uniform.
	Skew float64
	// UserLifetime, when positive, makes users come and go: population
	// slot k (0 ≤ k < Users, Zipf-ranked as above) is held by a new user
	// every UserLifetime of event time, the slots' turnovers staggered
	// evenly (slot k changes hands at start + (j − k/Users)·UserLifetime).
	// A user id ("u<slot>.<generation>") is then active for at most
	// UserLifetime of event time — a few windows, as web users are — which
	// is the population contribution.max_windows_per_user is made for.
	// Default 0: every user lives for the whole stream ("u<slot>").
	UserLifetime time.Duration
	// Steady, when positive, makes a steady population of returning users
	// instead of Zipf-skewed activity (Skew is then unused): the events of
	// each Steady-long block of event time (aligned to the Unix epoch, as
	// the stage's windows are) are distinct users, drawn without
	// replacement (a fresh pseudo-random permutation of the population per
	// block; a block with more events than users wraps round), and the
	// users' countries are uniform (user k's is Countries[k mod 3]). With
	// n events per block a user is in a block with probability n/Users,
	// independently enough across blocks for a demo: over a day of 1-minute
	// blocks the active blocks per user are about Binomial(1440, n/Users),
	// and each (country, block) holds n/3 users — the population
	// `stage eval steady` simulates and examples/returning-users.yaml
	// plans for. Default 0: Zipf-skewed activity.
	Steady time.Duration
	// IDPrefix is prepended to every user id ("<prefix>u<slot>…"), so that
	// streams with different prefixes have no user in common: the demo
	// gives each run a random one, and a second run's users are not the
	// previous run's, whose windows the cross-window bound has already
	// counted (contribution.max_windows_per_user). At most 32 of
	// A–Z a–z 0–9 . _ -. Default "": ids as above.
	IDPrefix string
	// Disorder, when positive, moves each event's time back by a uniform
	// random amount in [0, Disorder), so the stream arrives slightly out of
	// event-time order (as real streams do). Default 0: in order.
	Disorder time.Duration
	// TimeFormat of "ts". Default EpochMillis. JSON only: Avro and
	// Protobuf write epoch milliseconds.
	TimeFormat TimeFormat
	// Format of the message value (encode.go). Default JSON.
	Format Format
	// SchemaID is the schema id Avro and Protobuf values carry (the id of
	// AvroSchema or ProtoSchema in the registry, or in
	// events.schema_files). Required for those formats.
	SchemaID int32
	// Limit stops Run after this many events. Default 0: until the context
	// ends.
	Limit int64
	// Unpaced makes Run write as fast as the writer accepts instead of at
	// EventsPerSecond. Event times are unchanged.
	Unpaced bool
	// BatchSize caps the messages per WriteMessages call in Run. Default
	// EventsPerSecond/20 (one batch per 50 ms), at least 1, at most 1000.
	BatchSize int
	// OnError, if set, is told about every failed write; Run retries the
	// same batch with backoff until it succeeds, the context ends or
	// GiveUpAfter has passed.
	OnError func(error)
	// GiveUpAfter, when positive, makes Run return an error once writes
	// have failed for this long without one succeeding (a topic that does
	// not exist or cannot be written). Default 0: retry until the context
	// ends (the broker may come back).
	GiveUpAfter time.Duration
}

// Writer is what Run writes to; a *kafka.Writer fits.
type Writer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Event is one synthetic page view.
type Event struct {
	Seq     int64     // index in the stream, from 0
	Time    time.Time // event time, millisecond precision, UTC
	UserID  string
	Page    string
	Country string // fixed per user
	Device  string
	Session uint64 // written as 16 hex digits; fixed per user and half hour of event time
}

// Generator produces one deterministic stream. It is safe for concurrent
// use, but run one Run or RunFrom at a time (Written follows the latest).
type Generator struct {
	cfg      Config
	start    time.Time
	step     time.Duration // event-time spacing
	userCDF  []float64     // cumulative Zipf weights, last = 1
	pageCDF  []float64
	ctryCDF  []float64
	devCDF   []float64
	userIDs  []string
	userCtry []uint8
	written  atomic.Int64
}

// New validates cfg, fills in defaults and returns a Generator.
func New(cfg Config) (*Generator, error) {
	if cfg.Users == 0 {
		cfg.Users = 300
	}
	if cfg.EventsPerSecond == 0 {
		cfg.EventsPerSecond = 200
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	if cfg.Skew == 0 {
		cfg.Skew = 1.1
	}
	var errs []error
	if cfg.UserLifetime < 0 {
		errs = append(errs, fmt.Errorf("user lifetime must not be negative, got %s", cfg.UserLifetime))
	}
	if cfg.Users < 1 {
		errs = append(errs, fmt.Errorf("users must be at least 1, got %d", cfg.Users))
	}
	if cfg.EventsPerSecond < 1 {
		errs = append(errs, fmt.Errorf("events per second must be at least 1, got %d", cfg.EventsPerSecond))
	}
	if !(cfg.TimeScale > 0) || math.IsInf(cfg.TimeScale, 0) {
		errs = append(errs, fmt.Errorf("time scale must be a positive finite number, got %v", cfg.TimeScale))
	}
	if math.IsNaN(cfg.Skew) || math.IsInf(cfg.Skew, 0) {
		errs = append(errs, fmt.Errorf("skew must be finite, got %v", cfg.Skew))
	}
	if cfg.Disorder < 0 {
		errs = append(errs, fmt.Errorf("disorder must not be negative, got %v", cfg.Disorder))
	}
	if cfg.TimeFormat != EpochMillis && cfg.TimeFormat != RFC3339 {
		errs = append(errs, fmt.Errorf("unknown time format %d", cfg.TimeFormat))
	}
	if cfg.Format != JSON && cfg.Format != Avro && cfg.Format != Protobuf {
		errs = append(errs, fmt.Errorf("unknown format %d", cfg.Format))
	}
	if cfg.Format != JSON && cfg.SchemaID < 1 {
		errs = append(errs, fmt.Errorf("format %s needs a positive schema id, got %d", cfg.Format, cfg.SchemaID))
	}
	if cfg.Format != JSON && cfg.TimeFormat != EpochMillis {
		errs = append(errs, fmt.Errorf("format %s writes ts as epoch milliseconds: the RFC 3339 time format is JSON's", cfg.Format))
	}
	if cfg.Limit < 0 {
		errs = append(errs, fmt.Errorf("limit must not be negative, got %d", cfg.Limit))
	}
	if cfg.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("batch size must not be negative, got %d", cfg.BatchSize))
	}
	if len(cfg.IDPrefix) > 32 || strings.TrimLeft(cfg.IDPrefix, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != "" {
		errs = append(errs, fmt.Errorf("user id prefix must be at most 32 of A-Z a-z 0-9 . _ -, got %q", cfg.IDPrefix))
	}
	if cfg.GiveUpAfter < 0 {
		errs = append(errs, fmt.Errorf("give-up time must not be negative, got %v", cfg.GiveUpAfter))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("generator: %w", err)
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = min(max(cfg.EventsPerSecond/20, 1), 1000)
	}
	start := cfg.Start
	if start.IsZero() {
		start = time.Now()
	}
	g := &Generator{
		cfg:   cfg,
		start: time.UnixMilli(start.UnixMilli()).UTC(),
		step:  time.Duration(float64(time.Second) * cfg.TimeScale / float64(cfg.EventsPerSecond)),
	}
	if g.step <= 0 {
		return nil, fmt.Errorf("generator: time scale %v over %d events per second is below a nanosecond per event", cfg.TimeScale, cfg.EventsPerSecond)
	}
	g.userCDF = make([]float64, cfg.Users)
	skew := max(cfg.Skew, 0)
	for k := range g.userCDF {
		g.userCDF[k] = math.Pow(float64(k+1), -skew)
	}
	normalize(g.userCDF)
	g.pageCDF = cdf(pageWeights)
	g.ctryCDF = cdf(countryWeights)
	g.devCDF = cdf(deviceWeights)
	g.userIDs = make([]string, cfg.Users)
	g.userCtry = make([]uint8, cfg.Users)
	for k := range g.userIDs {
		g.userIDs[k] = cfg.IDPrefix + "u" + strconv.Itoa(k)
		g.userCtry[k] = uint8(pick(g.ctryCDF, unit(mix(cfg.Seed^0x636f756e747279, uint64(k)))))
		if cfg.Steady > 0 {
			g.userCtry[k] = uint8(k % len(Countries))
		}
	}
	return g, nil
}

// Start is the event time of event 0.
func (g *Generator) Start() time.Time { return g.start }

// Step is the event-time spacing between consecutive events.
func (g *Generator) Step() time.Duration { return g.step }

// Config returns the configuration with defaults filled in.
func (g *Generator) Config() Config { return g.cfg }

// Written is how many events (0..Written-1) the last Run has had
// acknowledged by its writer so far.
func (g *Generator) Written() int64 { return g.written.Load() }

// Event returns event i of the stream.
func (g *Generator) Event(i int64) Event {
	var p rand.PCG
	p.Seed(g.cfg.Seed, mix(0x6576656e74, uint64(i)))
	user := pick(g.userCDF, unit(p.Uint64()))
	if g.cfg.Steady > 0 {
		user = g.steadyUser(i)
	}
	page := pick(g.pageCDF, unit(p.Uint64()))
	dev := pick(g.devCDF, unit(p.Uint64()))
	t := g.start.Add(time.Duration(i) * g.step)
	if g.cfg.Disorder > 0 {
		t = t.Add(-time.Duration(p.Uint64() % uint64(g.cfg.Disorder)))
	}
	t = time.UnixMilli(t.UnixMilli()).UTC()
	half := uint64(t.UnixMilli() / (30 * 60 * 1000))
	id := g.userIDs[user]
	if l := g.cfg.UserLifetime; l > 0 {
		// The slot's generation at t: its turnovers are shifted back by
		// user/Users of a lifetime.
		phase := time.Duration(float64(l) * float64(user) / float64(g.cfg.Users))
		gen := int64((t.Sub(g.start) + phase) / l)
		if t.Sub(g.start)+phase < 0 {
			gen-- // Disorder before start: the previous generation
		}
		id += "." + strconv.FormatInt(gen, 10)
	}
	return Event{
		Seq:     i,
		Time:    t,
		UserID:  id,
		Page:    Pages[page],
		Country: Countries[g.userCtry[user]],
		Device:  Devices[dev],
		Session: mix(g.cfg.Seed^uint64(user), half),
	}
}

// steadyUser is the user of event i in Steady mode: the block of its
// (undisordered) event time, its rank k among the block's events, and the
// block's permutation of the population, k ↦ (a·k + b) mod Users with a
// coprime to Users (a bijection), a and b drawn from the seed and block.
func (g *Generator) steadyUser(i int64) int {
	block := g.cfg.Steady.Nanoseconds()
	at := func(j int64) int64 { return g.start.UnixNano() + j*g.step.Nanoseconds() }
	b := floorDiv(at(i), block)
	// The first event of block b: the least j with at(j) ≥ b·block.
	first := ceilDiv(b*block-g.start.UnixNano(), g.step.Nanoseconds())
	k := uint64(i - first)
	n := uint64(g.cfg.Users)
	var p rand.PCG
	p.Seed(g.cfg.Seed^0x737465616479, uint64(b))
	a := uint64(1)
	for n > 1 {
		if a = 1 + p.Uint64()%(n-1); gcd(a, n) == 1 {
			break
		}
	}
	return int((a*(k%n) + p.Uint64()%n) % n)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// AppendJSON appends the JSON encoding of e (one flat object, no newline).
func (g *Generator) AppendJSON(dst []byte, e Event) []byte {
	dst = append(dst, `{"ts":`...)
	if g.cfg.TimeFormat == RFC3339 {
		dst = append(dst, '"')
		dst = e.Time.AppendFormat(dst, "2006-01-02T15:04:05.000Z07:00")
		dst = append(dst, '"')
	} else {
		dst = strconv.AppendInt(dst, e.Time.UnixMilli(), 10)
	}
	dst = append(dst, `,"user_id":"`...)
	dst = append(dst, e.UserID...)
	dst = append(dst, `","page":"`...)
	dst = append(dst, e.Page...)
	dst = append(dst, `","country":"`...)
	dst = append(dst, e.Country...)
	dst = append(dst, `","device":"`...)
	dst = append(dst, e.Device...)
	dst = append(dst, `","session":"`...)
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(e.Session>>shift)&0xf])
	}
	dst = append(dst, `","seq":`...)
	dst = strconv.AppendInt(dst, e.Seq, 10)
	return append(dst, '}')
}

// Message returns event i as a Kafka message: key user_id, value the event
// in the configured Format (AppendValue).
// The message time is left zero (the writer stamps the wall clock): record
// timestamps far in the past would fall foul of time-based retention.
func (g *Generator) Message(i int64) kafka.Message {
	e := g.Event(i)
	return kafka.Message{Key: []byte(e.UserID), Value: g.AppendValue(nil, e)}
}

// Events iterates over events from, from+1, ..., from+n-1.
func (g *Generator) Events(from, n int64) iter.Seq[Event] {
	return func(yield func(Event) bool) {
		for i := from; i < from+n; i++ {
			if !yield(g.Event(i)) {
				return
			}
		}
	}
}

// Fill makes buf hold the values (AppendValue) of events 0..n-1, reusing the storage of buf
// and of its elements, and returns it. For benchmarks: after the first call
// with a given n, further calls allocate nothing.
func (g *Generator) Fill(buf [][]byte, n int) [][]byte {
	if cap(buf) < n {
		buf = append(buf[:cap(buf)], make([][]byte, n-cap(buf))...)
	}
	buf = buf[:n]
	for i := range buf {
		buf[i] = g.AppendValue(buf[i][:0], g.Event(int64(i)))
	}
	return buf
}

// Run writes the stream to w from event 0 at EventsPerSecond (or unpaced),
// in batches of at most BatchSize, until the context ends or Limit events
// have been written. A failed batch is retried, identical, with exponential
// backoff (50 ms to 2 s) and reported to OnError, so the acknowledged stream
// is always a prefix of the deterministic one: after Run, Truth(Written())
// describes exactly what the writer accepted (a writer that retries
// internally may still have stored a batch twice). Run returns nil when the
// context ends or the limit is reached, and an error when writes kept
// failing for GiveUpAfter.
func (g *Generator) Run(ctx context.Context, w Writer) error {
	return g.RunFrom(ctx, w, 0)
}

// RunFrom is Run starting at event first (to resume a stream).
func (g *Generator) RunFrom(ctx context.Context, w Writer, first int64) error {
	if first < 0 {
		return fmt.Errorf("generator: negative first event %d", first)
	}
	g.written.Store(first)
	began := time.Now()
	next := first
	msgs := make([]kafka.Message, 0, g.cfg.BatchSize)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if g.cfg.Limit > 0 && next >= g.cfg.Limit {
			return nil
		}
		due := next + int64(g.cfg.BatchSize)
		if !g.cfg.Unpaced {
			due = first + int64(time.Since(began).Seconds()*float64(g.cfg.EventsPerSecond))
		}
		if g.cfg.Limit > 0 {
			due = min(due, g.cfg.Limit)
		}
		if due <= next {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			continue
		}
		msgs = msgs[:0]
		for i := next; i < due && len(msgs) < g.cfg.BatchSize; i++ {
			msgs = append(msgs, g.Message(i))
		}
		if ok, err := g.write(ctx, w, msgs); !ok {
			return err
		}
		next += int64(len(msgs))
		g.written.Store(next)
	}
}

// write writes msgs until it succeeds (true), ctx ends (false, nil) or
// writes have failed for GiveUpAfter (false, the last error).
func (g *Generator) write(ctx context.Context, w Writer, msgs []kafka.Message) (bool, error) {
	backoff := retry.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
	began := time.Now()
	for {
		err := w.WriteMessages(ctx, msgs...)
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if g.cfg.OnError != nil {
			g.cfg.OnError(err)
		}
		if g.cfg.GiveUpAfter > 0 && time.Since(began) >= g.cfg.GiveUpAfter {
			return false, fmt.Errorf("generator: writes failing for %v: %w", time.Since(began).Round(time.Millisecond), err)
		}
		if backoff.Wait(ctx) != nil {
			return false, nil
		}
	}
}

const hexDigits = "0123456789abcdef"

// unit maps 64 random bits to [0, 1).
func unit(x uint64) float64 { return float64(x>>11) / (1 << 53) }

// mix is SplitMix64's finalizer over a^b·φ: a cheap, well-mixed hash of two
// words (used for per-event PCG seeds and per-user attributes).
func mix(a, b uint64) uint64 {
	z := a ^ (b * 0x9e3779b97f4a7c15)
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// cdf returns the normalized cumulative sums of w.
func cdf(w []float64) []float64 {
	c := make([]float64, len(w))
	copy(c, w)
	normalize(c)
	return c
}

// normalize turns weights into a cumulative distribution ending at 1.
func normalize(c []float64) {
	var s float64
	for i, w := range c {
		s += w
		c[i] = s
	}
	for i := range c {
		c[i] /= s
	}
	c[len(c)-1] = 1
}

// pick returns the index of the first cumulative weight above u.
func pick(c []float64, u float64) int {
	i := sort.Search(len(c), func(i int) bool { return c[i] > u })
	return min(i, len(c)-1)
}
