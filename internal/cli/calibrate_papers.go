package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/mechanism"
)

// `stage calibrate` for the mechanisms whose guarantee is ε- or (ε, δ)-DP
// rather than a calibrated RDP target: simplex-dirichlet (003),
// laplace-posterior (002 LSHist/LSDim, 004 §4.1.3–4.1.4), ehd and ehds
// (002 EHD/EHDS, 004 §4.2). The mechanism names are a contract.

const papersUsage = `
Mechanisms with an (ε, δ)-DP or ε-DP guarantee (each has its own flags; the
RDP flags above do not apply):

  stage calibrate --mechanism simplex-dirichlet --k 24 --eta 0.05 --eta-bar 0.05 \
                  --bins 3 --w 1,2 --b 0.4 [--average N] (--target-delta 0.05 | --gamma γ) [--json]
      Dir(k·p) for probability vectors p (003). --w: 0-based coordinates that may
      change (2 ≤ |W| ≤ bins−1); --b: bound on ‖p − q‖₁ in (0, 1]; --average N: the
      input is the average of N vectors (003 Theorem 2; default 1, identity query);
      --target-delta: γ minimizes ε subject to δ ≤ δ̂ (003 eq. (14)); --gamma fixes γ.
      Needs |W|·eta + eta-bar ≤ 1 and 2·eta < 1 − eta-bar.

  stage calibrate --mechanism laplace-posterior --prior 1,1,1 --epsilon 1 [--variant hist|dim] [--n N] [--json]
      Laplace noise on the posterior Dir(α + counts) parameters, ε-DP (replacement
      neighbours, public n). --variant hist (default, 002 LSHist) or dim (002 LSDim).

  stage calibrate --mechanism ehd  --prior 1,1 --n 100 --epsilon 1 [--max-candidates M] [--json]
  stage calibrate --mechanism ehds --prior 1,1 --n 100 --epsilon 1 --delta 1e-6 [--max-candidates M] [--counts 10,90] [--json]
      Exponential mechanism over the C(n+d−1, d−1) candidate posteriors scored by
      Hellinger distance: ehd with global sensitivity (ε-DP), ehds with smooth
      sensitivity ((ε, δ)-DP). --max-candidates bounds the candidates (default 1e6);
      --counts (ehds) also prints the smooth sensitivity S(counts), which is not private.

JSON fields (a contract: added to, never renamed): mechanism, guarantee
("pure-dp" | "approx-dp"), epsilon, delta, and per mechanism:
simplex-dirichlet: k, eta, eta_bar, bins, w, b, average, target_delta, gamma,
epsilon_beta, epsilon_gamma, p_star, b_prime, delta_lower, delta_exact;
laplace-posterior: prior, variant, n, scale; ehd: prior, n, candidates,
hellinger_sensitivity; ehds: prior, n, candidates, smoothing,
smooth_sensitivity (with --counts). Pure-DP mechanisms also print rdp, the
RDP curve they enter the accountant with (mechanism.PureDPRDP or their own).
`

// papersKinds are the mechanisms handled here.
var papersKinds = map[string]mechanism.Kind{
	string(mechanism.SimplexDirichlet): mechanism.SimplexDirichlet,
	string(mechanism.LaplacePosterior): mechanism.LaplacePosterior,
	string(mechanism.EHD):              mechanism.EHD,
	string(mechanism.EHDS):             mechanism.EHDS,
}

// papersMechanism returns the kind named by a --mechanism flag in args if it
// is one of papersKinds.
func papersMechanism(args []string) (mechanism.Kind, bool) {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		var v string
		switch {
		case a == "mechanism" && i+1 < len(args):
			v = args[i+1]
		case strings.HasPrefix(a, "mechanism="):
			v = strings.TrimPrefix(a, "mechanism=")
		default:
			continue
		}
		k, ok := papersKinds[v]
		return k, ok
	}
	return "", false
}

// papersOutput is the JSON of `stage calibrate --json` for these kinds.
type papersOutput struct {
	Mechanism string  `json:"mechanism"`
	Guarantee string  `json:"guarantee"`
	Epsilon   float64 `json:"epsilon"`
	Delta     float64 `json:"delta"`

	K            *float64 `json:"k,omitempty"`
	Eta          *float64 `json:"eta,omitempty"`
	EtaBar       *float64 `json:"eta_bar,omitempty"`
	Bins         *int     `json:"bins,omitempty"`
	W            []int    `json:"w,omitempty"`
	B            *float64 `json:"b,omitempty"`
	Average      *int     `json:"average,omitempty"`
	TargetDelta  *float64 `json:"target_delta,omitempty"`
	Gamma        *float64 `json:"gamma,omitempty"`
	EpsilonBeta  *float64 `json:"epsilon_beta,omitempty"`
	EpsilonGamma *float64 `json:"epsilon_gamma,omitempty"`
	PStar        *float64 `json:"p_star,omitempty"`
	BPrime       *float64 `json:"b_prime,omitempty"`
	DeltaLower   *float64 `json:"delta_lower,omitempty"`
	DeltaExact   *bool    `json:"delta_exact,omitempty"`

	Prior                []float64 `json:"prior,omitempty"`
	Variant              string    `json:"variant,omitempty"`
	N                    *int      `json:"n,omitempty"`
	Scale                *float64  `json:"scale,omitempty"`
	Candidates           *int      `json:"candidates,omitempty"`
	HellingerSensitivity *float64  `json:"hellinger_sensitivity,omitempty"`
	Smoothing            *float64  `json:"smoothing,omitempty"`
	SmoothSensitivity    *float64  `json:"smooth_sensitivity,omitempty"`

	RDP []rdpPoint `json:"rdp,omitempty"`
}

// papersFlags lists each kind's flags (anything else is refused).
var papersFlags = map[mechanism.Kind][]string{
	mechanism.SimplexDirichlet: {"mechanism", "k", "eta", "eta-bar", "bins", "w", "b", "average", "target-delta", "gamma", "json"},
	mechanism.LaplacePosterior: {"mechanism", "prior", "epsilon", "variant", "n", "json"},
	mechanism.EHD:              {"mechanism", "prior", "n", "epsilon", "max-candidates", "json"},
	mechanism.EHDS:             {"mechanism", "prior", "n", "epsilon", "delta", "max-candidates", "counts", "json"},
}

func calibratePapers(kind mechanism.Kind, args []string, stdout, stderr io.Writer) int {
	out, asJSON, err := runPapers(kind, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, calibrateUsage+papersUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "stage calibrate: %v\n", err)
		if ue := (*usageError)(nil); errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "stage calibrate: write json: %v\n", err)
			return 1
		}
		return 0
	}
	printPapers(stdout, out)
	return 0
}

func parseList[T any](name, raw string, parse func(string) (T, error), want string) ([]T, error) {
	var out []T
	for _, f := range strings.Split(raw, ",") {
		v, err := parse(strings.TrimSpace(f))
		if err != nil {
			return nil, badFlag("--%s must be %s, got %q", name, want, raw)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseFloatFinite(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
		err = errors.New("not finite")
	}
	return v, err
}

func runPapers(kind mechanism.Kind, args []string) (*papersOutput, bool, error) {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	str := map[string]*string{}
	for _, name := range []string{"mechanism", "k", "eta", "eta-bar", "bins", "w", "b", "average", "target-delta", "gamma",
		"prior", "epsilon", "variant", "n", "delta", "max-candidates", "counts"} {
		str[name] = fs.String(name, "", "")
	}
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, false, err
		}
		return nil, false, badFlag("%s (see stage calibrate -h)", strings.Replace(err.Error(), " -", " --", 1))
	}
	if fs.NArg() > 0 {
		return nil, false, badFlag("unexpected argument %q: every input is a --flag (see stage calibrate -h)", fs.Arg(0))
	}
	allowed := map[string]bool{}
	for _, f := range papersFlags[kind] {
		allowed[f] = true
	}
	set := map[string]bool{}
	var stray error
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		if !allowed[f.Name] && stray == nil {
			stray = badFlag("--%s does not apply to --mechanism %s (its flags: --%s)", f.Name, kind, strings.Join(papersFlags[kind][1:], ", --"))
		}
	})
	if stray != nil {
		return nil, false, stray
	}
	num := func(name string, def float64, required bool, want string, ok func(float64) bool) (float64, error) {
		if !set[name] {
			if required {
				return 0, badFlag("--%s is required for --mechanism %s: %s", name, kind, want)
			}
			return def, nil
		}
		v, err := parseFloatFinite(strings.TrimSpace(*str[name]))
		if err != nil || !ok(v) {
			return 0, badFlag("--%s must be %s, got %q", name, want, *str[name])
		}
		return v, nil
	}
	integer := func(name string, def int, required bool, want string, ok func(int) bool) (int, error) {
		if !set[name] {
			if required {
				return 0, badFlag("--%s is required for --mechanism %s: %s", name, kind, want)
			}
			return def, nil
		}
		v, err := strconv.Atoi(strings.TrimSpace(*str[name]))
		if err != nil || !ok(v) {
			return 0, badFlag("--%s must be %s, got %q", name, want, *str[name])
		}
		return v, nil
	}
	pos := func(v float64) bool { return v > 0 }
	spec := mechanism.Spec{Kind: kind}
	var counts []float64
	var err error
	switch kind {
	case mechanism.SimplexDirichlet:
		s := &mechanism.SimplexSpec{}
		if s.K, err = num("k", 0, true, "a finite number > 0", pos); err != nil {
			return nil, false, err
		}
		if s.Eta, err = num("eta", 0, true, "a finite number > 0", pos); err != nil {
			return nil, false, err
		}
		if s.EtaBar, err = num("eta-bar", 0, true, "a finite number > 0", pos); err != nil {
			return nil, false, err
		}
		if s.Bins, err = integer("bins", 0, true, "an integer ≥ 3", func(v int) bool { return v >= 3 }); err != nil {
			return nil, false, err
		}
		if !set["w"] {
			return nil, false, badFlag("--w is required for --mechanism simplex-dirichlet: 0-based coordinates, e.g. 1,2")
		}
		if s.W, err = parseList("w", *str["w"], strconv.Atoi, "a comma-separated list of 0-based coordinates"); err != nil {
			return nil, false, err
		}
		if s.B, err = num("b", 0, true, "a number in (0, 1]", func(v float64) bool { return v > 0 && v <= 1 }); err != nil {
			return nil, false, err
		}
		if s.Average, err = integer("average", 1, false, "an integer ≥ 1", func(v int) bool { return v >= 1 }); err != nil {
			return nil, false, err
		}
		switch {
		case set["target-delta"] && set["gamma"]:
			return nil, false, badFlag("--target-delta and --gamma are mutually exclusive: give δ̂ to optimize γ (003 eq. (14)), or a fixed γ")
		case set["gamma"]:
			if s.Gamma, err = num("gamma", 0, true, "a number in (0, 1/|W|]", pos); err != nil {
				return nil, false, err
			}
		default:
			if s.TargetDelta, err = num("target-delta", 0, true, "a number in (0, 1)", func(v float64) bool { return v > 0 && v < 1 }); err != nil {
				return nil, false, err
			}
		}
		spec.Simplex = s
	default:
		p := &mechanism.PosteriorSpec{}
		if !set["prior"] {
			return nil, false, badFlag("--prior is required for --mechanism %s: comma-separated Dirichlet prior parameters > 0, e.g. 1,1", kind)
		}
		if p.Prior, err = parseList("prior", *str["prior"], parseFloatFinite, "comma-separated finite numbers > 0"); err != nil {
			return nil, false, err
		}
		if p.Epsilon, err = num("epsilon", 0, true, "a finite number > 0", pos); err != nil {
			return nil, false, err
		}
		needN := kind != mechanism.LaplacePosterior
		if p.N, err = integer("n", 0, needN, "an integer ≥ 1 (the public number of observations)", func(v int) bool { return v >= 1 }); err != nil {
			return nil, false, err
		}
		if kind == mechanism.LaplacePosterior && set["variant"] {
			p.Variant = mechanism.PosteriorVariant(*str["variant"])
		}
		if kind != mechanism.LaplacePosterior {
			if p.MaxCandidates, err = integer("max-candidates", 0, false, "an integer ≥ 1", func(v int) bool { return v >= 1 }); err != nil {
				return nil, false, err
			}
		}
		if kind == mechanism.EHDS {
			if p.Delta, err = num("delta", 0, true, "a number in (0, 1)", func(v float64) bool { return v > 0 && v < 1 }); err != nil {
				return nil, false, err
			}
			if set["counts"] {
				if counts, err = parseList("counts", *str["counts"], parseFloatFinite, "comma-separated whole numbers ≥ 0 summing to --n"); err != nil {
					return nil, false, err
				}
			}
		}
		spec.Posterior = p
	}
	m, err := mechanism.New(spec)
	if err != nil {
		var pe *mechanism.ParamError
		if errors.As(err, &pe) || errors.Is(err, mechanism.ErrInvalidParameter) {
			return nil, false, badFlag("%v", err)
		}
		return nil, false, err
	}
	out, err := describePapers(m, counts)
	return out, *asJSON, err
}

// describePapers fills the output from a calibrated mechanism.
func describePapers(m mechanism.Mechanism, counts []float64) (*papersOutput, error) {
	eps, delta := m.(mechanism.ApproxDP).DP()
	spec := m.Spec()
	out := &papersOutput{Mechanism: string(spec.Kind), Epsilon: eps, Delta: delta, Guarantee: "approx-dp"}
	if delta == 0 {
		out.Guarantee = "pure-dp"
		curve := budget.CurveOf(m, budget.DefaultOrders())
		if err := curve.Err(); err != nil {
			return nil, err
		}
		for _, p := range curve.Points() {
			if !math.IsInf(p.Epsilon, 1) {
				out.RDP = append(out.RDP, rdpPoint{Order: p.Order, Epsilon: p.Epsilon})
			}
		}
	}
	switch spec.Kind {
	case mechanism.SimplexDirichlet:
		s := spec.Simplex
		g := m.(interface {
			Guarantee() mechanism.SimplexGuarantee
		}).Guarantee()
		out.K, out.Eta, out.EtaBar, out.Bins, out.W, out.B, out.Average = &s.K, &s.Eta, &s.EtaBar, &s.Bins, s.W, &s.B, &s.Average
		if s.TargetDelta != 0 {
			out.TargetDelta = &s.TargetDelta
		}
		out.Gamma, out.EpsilonBeta, out.EpsilonGamma, out.PStar, out.BPrime = &g.Gamma, &g.EpsilonBeta, &g.EpsilonGamma, &g.PStar, &g.BPrime
		out.DeltaLower, out.DeltaExact = &g.DeltaLower, &g.DeltaExact
	default:
		p := spec.Posterior
		out.Prior = p.Prior
		if p.N > 0 {
			out.N = ptr(p.N)
		}
		params := m.Params()
		switch spec.Kind {
		case mechanism.LaplacePosterior:
			out.Variant, out.Scale = string(p.Variant), ptr(params.Scale)
		case mechanism.EHD:
			out.HellingerSensitivity = ptr(params.HellingerSensitivity)
		case mechanism.EHDS:
			out.Smoothing = ptr(params.Smoothing)
			if counts != nil {
				s, err := m.(interface {
					SmoothSensitivity([]float64) (float64, error)
				}).SmoothSensitivity(counts)
				if err != nil {
					return nil, badFlag("--counts: %v", err)
				}
				out.SmoothSensitivity = &s
			}
		}
		if c, ok := m.(interface{ Candidates() int }); ok {
			out.Candidates = ptr(c.Candidates())
		}
	}
	return out, nil
}

func printPapers(w io.Writer, o *papersOutput) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "mechanism\t%s\n", o.Mechanism)
	if o.Guarantee == "pure-dp" {
		fmt.Fprintf(tw, "guarantee\tε=%s-DP per release (pure)\n", g(o.Epsilon))
	} else {
		fmt.Fprintf(tw, "guarantee\t(ε=%s, δ=%s)-DP per release (composed by adding ε and δ)\n", g(o.Epsilon), g(o.Delta))
	}
	if o.K != nil {
		fmt.Fprintf(tw, "parameters\tk=%s  η=%s  η̄=%s  bins=%d  W=%v  b=%s  average of N=%d\n", g(*o.K), g(*o.Eta), g(*o.EtaBar), *o.Bins, o.W, g(*o.B), *o.Average)
		fmt.Fprintf(tw, "γ\t%s  (Ω₁ = {x : x_i ≥ γ, i ∈ W}, 003 eq. (3))\n", g(*o.Gamma))
		fmt.Fprintf(tw, "ε parts\tbeta term %s + γ term %s  (p* = %s, b′ = b/N = %s)\n", g(*o.EpsilonBeta), g(*o.EpsilonGamma), g(*o.PStar), g(*o.BPrime))
		how := "exact (|W| = 2), enclosed in"
		if !*o.DeltaExact {
			how = "union bound (|W| ≥ 3); exact δ in"
		}
		fmt.Fprintf(tw, "δ\t%s [%s, %s]\n", how, g(*o.DeltaLower), g(o.Delta))
	}
	if o.Prior != nil {
		fmt.Fprintf(tw, "prior\tDir(%v)\n", o.Prior)
	}
	if o.N != nil {
		fmt.Fprintf(tw, "n\t%d observations (public)\n", *o.N)
	}
	if o.Scale != nil {
		fmt.Fprintf(tw, "parameters\tvariant %s, discrete Laplace scale b=%s\n", o.Variant, g(*o.Scale))
	}
	if o.Candidates != nil {
		fmt.Fprintf(tw, "candidates\t%d posteriors\n", *o.Candidates)
	}
	if o.HellingerSensitivity != nil {
		fmt.Fprintf(tw, "sensitivity\t%s (global, Hellinger score)\n", g(*o.HellingerSensitivity))
	}
	if o.Smoothing != nil {
		fmt.Fprintf(tw, "smoothing γ\t%s\n", g(*o.Smoothing))
	}
	if o.SmoothSensitivity != nil {
		fmt.Fprintf(tw, "S(counts)\t%s (smooth sensitivity; NOT private)\n", g(*o.SmoothSensitivity))
	}
	if len(o.RDP) > 0 {
		fmt.Fprintf(tw, "\nRDP curve it enters the accountant with (selected orders)\n  order λ\tε(λ)\n")
		for _, p := range o.RDP {
			switch p.Order {
			case 1.5, 2, 4, 8, 16, 32, 64:
				fmt.Fprintf(tw, "  %s\t%s\n", g(p.Order), g(p.Epsilon))
			}
		}
	}
	tw.Flush()
}
