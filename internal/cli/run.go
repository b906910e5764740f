package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/generator"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/internal/lib/buildinfo"
	"github.com/dpstage/stage/internal/lib/embedded"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// Run implements `stage run --config FILE`. SIGINT/SIGTERM stop consuming,
// finish the release in flight, commit and exit 0; a second signal exits at
// once (nothing is lost: recorded releases are republished on restart).
func Run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "path to the stage's YAML config (required)")
	print := fs.Bool("print", false, "print every release for humans on stdout (default: on with log.format console)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "stage run: --config is required")
		return 2
	}
	cfg, code := loadConfig(*path, stderr)
	if cfg == nil {
		return code
	}
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "stage run: %v\n", err)
		return 2
	}
	defer log.Sync() //nolint:errcheck

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan struct{})
	defer close(done)
	go func() { // owner: Run; ends when Run returns. A second signal after the first exits at once.
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		stop()
		hard := make(chan os.Signal, 1)
		signal.Notify(hard, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(hard)
		select {
		case <-hard:
			log.Warn("second signal: exiting without draining")
			os.Exit(1)
		case <-done:
		}
	}()

	if err := runStage(ctx, cfg, log, stdout, *print || cfg.Log.Format == config.LogFormatConsole); err != nil {
		log.Error("stage stopped", zap.Error(err))
		return 1
	}
	log.Info("stage stopped cleanly")
	return 0
}

// runStage starts the HTTP server on its two listeners — the public one
// (dashboard, API; its address is the first line logged) and the operator
// one (/metrics) —, the embedded broker (when no brokers are
// configured; on kafka.embedded_port, its address printed on stdout) and the
// generator (when enabled), then runs the stage until ctx ends. The HTTP server outlives the stage's drain, so /readyz reports it.
func runStage(ctx context.Context, cfg *config.Config, log *zap.Logger, stdout io.Writer, print bool) error {
	var web *httpapi.Server
	if cfg.HTTP.Address != "" || cfg.HTTP.OperatorAddress != "" {
		// Two listeners kept apart: the public one (the dashboard and
		// /api: releases and budget only) and the operator one (/metrics:
		// event and drop counts, which are private).
		var pub, op net.Listener
		var err error
		closeAll := func() {
			for _, ln := range []net.Listener{pub, op} {
				if ln != nil {
					ln.Close()
				}
			}
		}
		if cfg.HTTP.Address != "" {
			if pub, err = httpapi.Listen(cfg.HTTP.Address); err != nil {
				return fmt.Errorf("http.address: %w%s", err, portTaken(err))
			}
		}
		if cfg.HTTP.OperatorAddress != "" {
			if op, err = httpapi.Listen(cfg.HTTP.OperatorAddress); err != nil {
				closeAll()
				return fmt.Errorf("http.operator_address: %w%s", err, portTaken(err))
			}
		}
		if pub != nil {
			log.Info("dashboard: " + httpapi.URL(pub))
		}
		if op != nil {
			log.Info("operator endpoint (metrics): " + httpapi.URL(op) + "metrics")
		}
		web, err = httpapi.New(httpapi.Options{Config: cfg, Log: log.Named("http")})
		if err != nil {
			closeAll()
			return err
		}
		hctx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
		var served sync.WaitGroup
		for _, l := range []struct {
			ln    net.Listener
			serve func(context.Context, net.Listener) error
			what  string
		}{{pub, web.Serve, "public"}, {op, web.ServeOperator, "operator"}} {
			if l.ln == nil {
				continue
			}
			served.Add(1)
			go func() { // owner: runStage; ends when stopHTTP is called below
				defer served.Done()
				if err := l.serve(hctx, l.ln); err != nil {
					log.Error("http server stopped", zap.String("listener", l.what), zap.Error(err))
				}
			}()
		}
		defer func() { stopHTTP(); served.Wait() }()
	}
	// Which build runs (after the dashboard's address, the first line).
	bi := buildinfo.Get()
	log.Info("stage starting", zap.String("version", bi.Version), zap.String("revision", bi.Revision), zap.String("go_version", bi.GoVersion))
	brokers := cfg.Kafka.Brokers
	if len(brokers) == 0 {
		b, err := startEmbedded(ctx, cfg, log)
		if err != nil {
			return err
		}
		if b == nil { // stopped while waiting as a standby
			return nil
		}
		defer b.Close()
		brokers = b.Addrs()
		log.Info("embedded Kafka-protocol broker started (no external Kafka needed)", zap.String("address", b.Addr()),
			zap.String("input_topic", cfg.Kafka.InputTopic), zap.String("output_topic", cfg.Kafka.OutputTopic))
		// Printed, not only logged, so that other clients can attach.
		fmt.Fprintf(stdout, "embedded Kafka broker at %s: input topic %q, output topic %q (e.g. kcat -b %s -t %s -C)\n",
			b.Addr(), cfg.Kafka.InputTopic, cfg.Kafka.OutputTopic, b.Addr(), cfg.Kafka.OutputTopic)
	}
	dialer, transport, err := kafkaSecurity(cfg)
	if err != nil {
		return err
	}
	var printer *release.Printer
	if print {
		printer = release.NewPrinter(stdout)
	}
	st, err := pipeline.New(pipeline.Options{
		Config:    cfg,
		Log:       log,
		Brokers:   brokers,
		Dialer:    dialer,
		Transport: transport,
		Printer:   printer,
		OnRelease: onRelease(web),
	})
	if err != nil {
		return err
	}
	if web != nil {
		web.Attach(st)
	}
	for _, w := range append(cfg.Warnings(), plan.Warnings(cfg, st.Plan())...) {
		log.Warn("config: "+w.Message, zap.String("path", w.Path), zap.Int("line", w.Line))
	}
	logPlan(log, cfg, st.Plan())

	if cfg.Generator.Enabled {
		gen, err := newGenerator(ctx, cfg, generator.Config{})
		if err != nil {
			return err
		}
		w := inputWriter(brokers, cfg, transport)
		defer w.Close()
		gctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan struct{})
		go func() { // owner: runStage; ends with gctx
			defer close(done)
			if err := gen.Run(gctx, w); err != nil && gctx.Err() == nil {
				log.Warn("generator stopped", zap.Error(err))
			}
		}()
		defer func() { cancel(); <-done }()
		log.Info("synthetic event generator started", zap.Int("users", cfg.Generator.Users),
			zap.Int("events_per_second", cfg.Generator.EventsPerSecond), zap.Float64("time_scale", cfg.Generator.TimeScale))
	}
	return st.Run(ctx)
}

// portTaken is the hint for a listener whose port is in use: most often a
// second copy of the stage on one machine (the demo's defaults are fixed
// ports).
func portTaken(err error) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	return " (another stage process — a second copy of the demo? — or another program has it: give this one other http.address and " +
		"http.operator_address ports, e.g. 127.0.0.1:0 for a free one; a copy on the same state.dir then waits as a standby)"
}

// embeddedStandbyPoll is how often a standby retries state.dir's embedded
// broker (startEmbedded). A variable for tests.
var embeddedStandbyPoll = time.Second

// startEmbedded starts the embedded broker on state.dir/kafka. The broker
// locks that directory first (embedded.ErrDataDirInUse): while another
// stage process sharing state.dir runs its embedded broker there — the
// active instance of two copies of the demo —, this one waits as a
// standby with no broker of its own, polling every embeddedStandbyPoll,
// and starts the broker on the same data when the active one exits (a
// crash frees the lock too); it then takes the ledger's lock (single)
// as any standby does. Two brokers on one directory would write one log
// twice over and damage it. It returns nil, nil when ctx ends first.
func startEmbedded(ctx context.Context, cfg *config.Config, log *zap.Logger) (*embedded.Broker, error) {
	dir := filepath.Join(cfg.State.Dir, "kafka")
	waiting := false
	for {
		b, err := embedded.Start(embedded.Config{
			Port:    cfg.Kafka.EmbeddedPort,
			DataDir: dir,
			Topics:  embeddedTopics(cfg),
			Logger:  log.Named("broker"),
		})
		switch {
		case err == nil:
			if waiting {
				log.Info("the other stage process left state.dir: this instance takes over, with the embedded broker on the same data", zap.String("state_dir", cfg.State.Dir))
			}
			return b, nil
		case !errors.Is(err, embedded.ErrDataDirInUse):
			if cfg.Kafka.EmbeddedPort != 0 {
				return nil, fmt.Errorf("start embedded broker on kafka.embedded_port %d (taken? set 0 for a free port): %w", cfg.Kafka.EmbeddedPort, err)
			}
			return nil, fmt.Errorf("start embedded broker: %w", err)
		case !waiting:
			log.Info("another stage process holds state.dir and runs the embedded broker on it: waiting as a standby, with no broker of its own, until it exits "+
				"(to run a second, independent demo, give it another state.dir)", zap.String("state_dir", cfg.State.Dir), zap.String("broker_data", dir))
			waiting = true
		}
		t := time.NewTimer(embeddedStandbyPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
	}
}

// logPlan logs the privacy plan: the count histograms' calibration (when
// there are any) and the average histograms' guarantees.
func logPlan(log *zap.Logger, cfg *config.Config, p *plan.Plan) {
	fields := []zap.Field{
		zap.Float64("budget_epsilon", p.Epsilon), zap.Float64("budget_delta", p.Delta),
		zap.Duration("period", cfg.Privacy.Budget.Period.D()), zap.Int("charges_per_period", p.Charges()),
	}
	if cfg.StatesTotalDelta() { // the guarantee's δ: budget_delta plus the user-hash collision term
		fields = append(fields, zap.Float64("total_delta", cfg.TotalDeltaOf(p.Delta)))
	}
	if p.Count != nil {
		spec := p.Count.Mechanism.Spec()
		fields = append(fields,
			zap.String("mechanism", string(spec.Kind)), zap.String("calibration", string(spec.Calibration)),
			zap.Float64("order", spec.Order), zap.Float64("calibration_target_rdp_epsilon", spec.RDPEpsilon),
			// The calibrated mechanism's own value: at most the target (the
			// samplers round their scales up: more noise).
			zap.Float64("mechanism_rdp_epsilon_per_release", p.Count.Mechanism.RDP(spec.Order)))
		// What a release is charged: the mechanism's curve rounded up plus
		// the release grid's residual for the floating-point mechanisms
		// (budget.ChargeOf), as each release's own "this release (λ, ε)"
		// line says; never below the mechanism's value.
		if charged, ok := budget.ChargeOf(p.Count.Mechanism, []float64{spec.Order}).At(spec.Order); ok {
			fields = append(fields, zap.Float64("charged_rdp_epsilon_per_release", charged))
		}
	}
	if p.Count != nil && p.Count.Views != nil { // budget shares: each view's own calibration
		for i, h := range cfg.Histograms {
			if v := p.Count.For(i); v != p.Count {
				spec := v.Mechanism.Spec()
				fields = append(fields, zap.Dict("calibration_"+h.Name, zap.Float64("budget_share", v.Share),
					zap.Float64("calibration_target_rdp_epsilon", spec.RDPEpsilon), zap.Float64("sigma", v.Mechanism.Params().Sigma),
					zap.Float64("scale", v.Mechanism.Params().Scale), zap.Float64("alpha", v.Mechanism.Params().Alpha)))
			}
		}
	}
	for _, a := range p.Averages {
		fields = append(fields, zap.Dict("average_"+a.Name,
			zap.Float64("epsilon_per_release", a.Epsilon), zap.Float64("delta_per_release", a.Delta)))
	}
	if p.Bound.K > 0 { // each view's own cross-window bound (histograms[].max_windows_per_user)
		for i, h := range cfg.Histograms {
			fields = append(fields, zap.Dict("view_"+h.Name, zap.Duration("window", h.WindowSize(cfg.Window.Size).D()),
				zap.Int("max_windows_per_user", p.HistBounds[i].K), zap.Int("windows_per_period", p.HistBounds[i].Windows)))
		}
	}
	log.Info("privacy plan", fields...)
}

// onRelease feeds the HTTP server's release store and latency histogram.
func onRelease(web *httpapi.Server) func(*ledger.Unit, time.Duration) {
	if web == nil {
		return nil
	}
	return web.OnRelease
}

func embeddedTopics(cfg *config.Config) map[string]int {
	t := map[string]int{cfg.Kafka.InputTopic: cfg.Kafka.InputPartitions, cfg.Kafka.OutputTopic: 1}
	if cfg.Kafka.DeadLetterTopic != "" {
		t[cfg.Kafka.DeadLetterTopic] = 1
	}
	return t
}

// newGenerator builds the configured generator, in the format of
// events.format (genschema.go); extra supplies OnError and GiveUpAfter.
func newGenerator(ctx context.Context, cfg *config.Config, extra generator.Config) (*generator.Generator, error) {
	prefix, err := runPrefix()
	if err != nil {
		return nil, err
	}
	format, schemaID, err := generatorFormat(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("generator: %w", err)
	}
	var steady time.Duration
	if cfg.Generator.Steady {
		steady = cfg.Window.Size.D() // distinct users in every base window
	}
	return generator.New(generator.Config{
		Steady:          steady,
		Format:          format,
		SchemaID:        schemaID,
		Users:           cfg.Generator.Users,
		EventsPerSecond: cfg.Generator.EventsPerSecond,
		TimeScale:       cfg.Generator.TimeScale,
		UserLifetime:    cfg.Generator.UserLifetime.D(),
		Seed:            uint64(time.Now().UnixNano()),
		IDPrefix:        prefix,
		OnError:         extra.OnError,
		GiveUpAfter:     extra.GiveUpAfter,
	})
}

// runPrefix is a user-id prefix of its own for each generator run
// ("r" and 8 random hex digits, then "-"): the ledger keeps the window
// bound's count of each user's windows for the whole budget period, so a
// second demo run with the previous run's ids would find most of its users
// already through their max_windows_per_user windows and drop their events
// (bound_windows).
func runPrefix() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generator: user id prefix: %w", err)
	}
	return "r" + hex.EncodeToString(b[:]) + "-", nil
}

func newLogger(lc config.Log, stderr io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(lc.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	var enc zapcore.Encoder
	if lc.Format == config.LogFormatConsole {
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	} else {
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(stderr)), level)
	return zap.New(core), nil
}

// Generate implements `stage generate --config FILE`: the demo producer. It
// writes synthetic events to the input topic until interrupted, whether or
// not generator.enabled is set (that key only makes `stage run` produce too).
func Generate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "path to the stage's YAML config (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "stage generate: --config is required")
		return 2
	}
	cfg, code := loadConfig(*path, stderr)
	if cfg == nil {
		return code
	}
	if len(cfg.Kafka.Brokers) == 0 {
		fmt.Fprintln(stderr, "stage generate: kafka.brokers is empty; `stage run` with generator.enabled produces into its embedded broker")
		return 2
	}
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "stage generate: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return generate(ctx, cfg, log, stderr)
}

// generate runs `stage generate` until ctx ends; it returns the exit code.
func generate(ctx context.Context, cfg *config.Config, log *zap.Logger, stderr io.Writer) int {
	_, transport, err := kafkaSecurity(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "stage generate: %v\n", err)
		return 2
	}
	gen, err := newGenerator(ctx, cfg, generator.Config{
		OnError:     func(err error) { log.Warn("write failed; retrying", zap.Error(err)) },
		GiveUpAfter: generateGiveUp,
	})
	if err != nil {
		fmt.Fprintf(stderr, "stage generate: %v\n", err)
		return 2
	}
	if err := checkInputTopic(ctx, cfg.Kafka.Brokers, cfg.Kafka.InputTopic, transport, generateGiveUp); err != nil {
		if ctx.Err() != nil {
			return 0
		}
		log.Error("cannot generate", zap.Error(err))
		return 1
	}
	w := inputWriter(cfg.Kafka.Brokers, cfg, transport)
	defer w.Close()
	log.Info("generating synthetic events", zap.Strings("brokers", cfg.Kafka.Brokers), zap.String("topic", cfg.Kafka.InputTopic))
	if err := gen.Run(ctx, w); err != nil && ctx.Err() == nil {
		log.Error("generator failed", zap.Error(err))
		return 1
	}
	return 0
}

// generateGiveUp bounds how long `stage generate` waits for the brokers
// and retries writes that keep failing before it exits with an error.
const generateGiveUp = 30 * time.Second

// checkInputTopic fails when topic does not exist (the writer does not
// create topics: it would retry forever) or the brokers cannot be reached
// within giveUp.
func checkInputTopic(ctx context.Context, brokers []string, topic string, transport *kafka.Transport, giveUp time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, giveUp)
	defer cancel()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second}
	if transport != nil {
		c.Transport = transport
	}
	backoff := 200 * time.Millisecond
	for {
		md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		if err == nil {
			for _, t := range md.Topics {
				if t.Name != topic {
					continue
				}
				if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
					return fmt.Errorf("input topic %q does not exist on %v: create it (or set kafka.input_topic to one that exists)", topic, brokers)
				}
				if t.Error != nil {
					return fmt.Errorf("input topic %q: %w", topic, t.Error)
				}
				if len(t.Partitions) == 0 {
					return fmt.Errorf("input topic %q has no partitions", topic)
				}
				return nil
			}
			return fmt.Errorf("input topic %q does not exist on %v: create it (or set kafka.input_topic to one that exists)", topic, brokers)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("cannot reach the brokers %v within %v: %w", brokers, giveUp, err)
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// inputWriter writes synthetic events, keyed by user (one user, one
// partition), with the partitioner kafka.distributed.partitioner names
// when the distributed mode is on (its bounders drop events whose user
// hashes elsewhere), else kafka-go's Hash.
func inputWriter(brokers []string, cfg *config.Config, transport *kafka.Transport) *kafka.Writer {
	var bal kafka.Balancer = &kafka.Hash{}
	if d := cfg.Kafka.Distributed; d.Enabled && d.Partitioner == config.PartitionerMurmur2 {
		bal = kafka.Murmur2Balancer{}
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: cfg.Kafka.InputTopic, Balancer: bal,
		RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond}
	if transport != nil { // a typed nil in the interface would crash kafka-go
		w.Transport = transport
	}
	return w
}

// The stage serves the operator's tracked-keys metric of selecting
// histograms.
var _ httpapi.SelectionKeysSource = (*pipeline.Stage)(nil)
