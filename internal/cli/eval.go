package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/dpstage/stage/internal/eval"
)

const evalUsage = `usage: stage eval [--out DIR] [--quick] [--reps N] [--seed S] [--workers N]

Reproduces the papers' privacy–utility measurements with seeded Monte-Carlo
runs and writes CSV files and PNG plots into --out:
  l2_vs_n      ℓ2 loss vs N: Dirichlet (concentrated, diffuse, exact), Gaussian,
               Laplace at (λ=2, ε) for ε ∈ {0.01, 0.1, 1}, d ∈ {10, 1000}
               (000 Figure 2); data Multinomial(N, Zipf p_i ∝ 1/i)
  renyi_vs_r   exact Rényi divergence vs 001 Algorithm 1's guarantee, λ ∈ {2, 20, 200}
               (001 Figure 3, top)
  kl_vs_eps    KL(f̃ ‖ y) vs ε̂ at δ = 1e-5 with a uniform baseline (001 Figure 3, bottom)
and prints a short summary. A full run takes about 2 minutes of CPU (a minute on 2 idle cores).

  stage eval steady --config FILE ...   the steady-population benchmark: the
               error of every view of a config through a budget period when
               the same users come back all day (stage eval steady -h)

Flags:
  --out DIR     output directory (default ./eval-out)
  --quick       small grids and 100 repetitions (a smoke run of a few seconds)
  --reps N      repetitions per Monte-Carlo point (default 5000; --quick 100)
  --seed S      seed of the simulation streams (default 1); runs are reproducible
                for a given seed whatever the number of workers
  --workers N   goroutines (default: the number of CPUs)
`

// Eval implements `stage eval`. Exit codes: 0 success, 1 failure, 2 bad flags.
func Eval(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "steady" {
		return EvalSteady(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", "eval-out", "")
	quick := fs.Bool("quick", false, "")
	reps := fs.Int("reps", 0, "")
	seed := fs.Uint64("seed", 1, "")
	workers := fs.Int("workers", 0, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, evalUsage)
			return 0
		}
		fmt.Fprintf(stderr, "stage eval: %v (see stage eval -h)\n", err)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "stage eval: unexpected argument %q (see stage eval -h)\n", fs.Arg(0))
		return 2
	case *reps < 0:
		fmt.Fprintf(stderr, "stage eval: --reps must be an integer ≥ 1, got %d\n", *reps)
		return 2
	case *workers < 0:
		fmt.Fprintf(stderr, "stage eval: --workers must be an integer ≥ 1, got %d\n", *workers)
		return 2
	case *out == "":
		fmt.Fprintf(stderr, "stage eval: --out must not be empty\n")
		return 2
	}
	w := *workers
	if w == 0 {
		w = runtime.NumCPU()
	}
	start := time.Now()
	fmt.Fprintf(stdout, "stage eval: %d workers, seed %d, writing to %s\n", w, *seed, *out)
	if _, err := eval.Run(eval.Options{Out: *out, Quick: *quick, Reps: *reps, Seed: *seed, Workers: w}, stdout); err != nil {
		fmt.Fprintf(stderr, "stage eval: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "done in %s\n", time.Since(start).Round(100*time.Millisecond))
	return 0
}
