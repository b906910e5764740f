package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/eval"
)

const evalSteadyUsage = `usage: stage eval steady --config FILE [--config FILE ...] [--users U] [--p P]
                         [--period D] [--window D] [--reps N] [--seed S] [--workers N] [--out DIR]

The steady-population benchmark: U users, each active in every base window
(window.size) of one budget period with probability P, one event per active
window (a random page from the Zipf law p_i ∝ 1/i over the declared bins; a
user's group is fixed for the period) — a dashboard whose users come back all
day. Every view of each config (each count histogram at its own window:
window.size or histograms[].window) is counted, bounded (max_events_per_user,
max_windows_per_user, ...) and released by the stage's own code with the
config's privacy plan, and each release is compared with the TRUE histogram
of its window (every event, before bounding). Prints, per view and stretch
of the period, the mean ℓ2 and KL error, the uniform release's ℓ2 (the
level of a blind view), the exact bounded histogram's ℓ2 (what the bounds
alone cost) and the share of the events that counted. With --out, writes
steady.csv (every window), steady_summary.csv and steady.png (ℓ2 per window
across the period, one panel per config). Average histograms are not measured.

Flags:
  --config FILE   a stage config to compare (repeat the flag; named by file name)
  --users U       users (default 30000)
  --p P           probability that a user is active in a base window (default 0.3)
  --period D      override privacy.budget.period of every config (default: each config's)
  --window D      override window.size of every config (default: each config's)
  --reps N        periods simulated per config, with fresh data and noise (default 1)
  --seed S        simulation seed (default 1); results do not depend on --workers
  --workers N     goroutines, one config period each (default: the number of CPUs)
  --out DIR       write the CSV files and the plot into DIR (created if needed)
`

// configList is a repeatable --config flag.
type configList []string

func (c *configList) String() string { return strings.Join(*c, ",") }
func (c *configList) Set(s string) error {
	if s == "" {
		return errors.New("empty path")
	}
	*c = append(*c, s)
	return nil
}

// EvalSteady implements `stage eval steady`. Exit codes: 0 success, 1
// failure, 2 bad flags or configuration.
func EvalSteady(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("eval steady", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var paths configList
	fs.Var(&paths, "config", "")
	users := fs.Int("users", 30000, "")
	p := fs.Float64("p", 0.3, "")
	period := fs.Duration("period", 0, "")
	win := fs.Duration("window", 0, "")
	reps := fs.Int("reps", 1, "")
	seed := fs.Uint64("seed", 1, "")
	workers := fs.Int("workers", 0, "")
	out := fs.String("out", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, evalSteadyUsage)
			return 0
		}
		fmt.Fprintf(stderr, "stage eval steady: %v (see stage eval steady -h)\n", err)
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "stage eval steady: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q (see stage eval steady -h)", fs.Arg(0))
	case len(paths) == 0:
		return bad("--config is required (repeat it to compare configs)")
	case *users < 1 || *users > 100_000_000:
		return bad("--users must be an integer in [1, 1e8], got %d", *users)
	case !(*p > 0 && *p <= 1):
		return bad("--p must be a probability in (0, 1], got %g", *p)
	case *period < 0 || *win < 0:
		return bad("--period and --window must be positive durations")
	case *reps < 1:
		return bad("--reps must be an integer ≥ 1, got %d", *reps)
	case *workers < 0:
		return bad("--workers must be an integer ≥ 1, got %d", *workers)
	}
	var cfgs []eval.SteadyConfig
	names := map[string]int{}
	for _, path := range paths {
		cfg, code := loadConfig(path, stderr)
		if cfg == nil {
			return code
		}
		if *period > 0 || *win > 0 {
			if *period > 0 {
				cfg.Privacy.Budget.Period = config.Duration(*period)
			}
			if *win > 0 {
				cfg.Window.Size = config.Duration(*win)
			}
			if err := cfg.Validate(); err != nil {
				fmt.Fprintf(stderr, "%s with --period/--window: %v\n", path, err)
				return 2
			}
		}
		name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		if names[name]++; names[name] > 1 {
			name = fmt.Sprintf("%s#%d", name, names[name])
		}
		cfgs = append(cfgs, eval.SteadyConfig{Name: name, Config: cfg})
	}
	w := *workers
	if w == 0 {
		w = runtime.NumCPU()
	}
	start, cpu0 := time.Now(), eval.ProcessCPU()
	res, err := eval.RunSteady(eval.SteadyOptions{Users: *users, P: *p, Reps: *reps, Seed: *seed, Workers: w, Configs: cfgs})
	if err != nil {
		fmt.Fprintf(stderr, "stage eval steady: %v\n", err)
		return 1
	}
	var base, per time.Duration
	for _, c := range cfgs {
		if b := c.Config.Window.Size.D(); base == 0 || b < base {
			base = b
		}
		per = max(per, c.Config.Privacy.Budget.Period.D())
	}
	sums := res.Summarize(eval.SteadySegments(base, per))
	if err := eval.WriteSteadyTable(stdout, res, sums); err != nil {
		fmt.Fprintf(stderr, "stage eval steady: %v\n", err)
		return 1
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			fmt.Fprintf(stderr, "stage eval steady: %v\n", err)
			return 1
		}
		files, err := eval.WriteSteadyFiles(*out, res, sums)
		if err != nil {
			fmt.Fprintf(stderr, "stage eval steady: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote %s in %s\n", strings.Join(files, ", "), *out)
	} else {
		fmt.Fprintln(stdout, "(add --out DIR for the per-window CSV and the plot)")
	}
	fmt.Fprintf(stdout, "done in %s (%d workers", time.Since(start).Round(100*time.Millisecond), w)
	if cpu := eval.ProcessCPU() - cpu0; cpu > 0 {
		fmt.Fprintf(stdout, "; %s of CPU", cpu.Round(100*time.Millisecond))
	}
	fmt.Fprintln(stdout, ")")
	return 0
}
