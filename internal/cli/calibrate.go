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

const calibrateUsage = `usage: stage calibrate [flags]

Answers "what noise does this privacy target need?" without Kafka.

Per-release target (λ, ε)-RDP:
  stage calibrate --mechanism dirichlet --calibration concentrated \
                  --order 2 --rdp-epsilon 1 --l2-sensitivity-sq 2 --linf-sensitivity 1 [--json]
Total (ε, δ)-DP over several composed releases (plans the per-release target):
  stage calibrate --mechanism dirichlet ... --epsilon 1 --delta 1e-6 --releases 24 [--json]

Flags:
  --mechanism M            dirichlet (default) | gaussian | laplace
                           (simplex-dirichlet | laplace-posterior | ehd | ehds: see below)
  --calibration C          dirichlet only: concentrated (default) | diffuse | closed-form | exact
  --neighbour N            dirichlet exact only: replace | add_remove — the relation the
                           sensitivities come from (default: any pair within them)
  --order λ                RDP order of the target, finite and > 1 (default 2)
  --rdp-epsilon ε          per-release RDP target at --order, finite and > 0
                           (required unless --epsilon is given)
  --l2-sensitivity-sq Δ2²  finite and > 0 (dirichlet, gaussian; laplace: default of --l1-sensitivity)
  --linf-sensitivity Δ∞    finite and > 0 (dirichlet), ≥ 1 (laplace)
  --l1-sensitivity Δ1      laplace only, finite and ≥ 1; default Δ2² (see below)
  --lower-bound b          dirichlet diffuse only: known lower bound on every count, ≥ 0 (default 0)
  --epsilon ε              total ε of (ε, δ)-DP over --releases releases, finite and > 0
  --delta δ                with --epsilon: in (0, 1) (default 1e-6)
  --releases n             with --epsilon: composed releases, integer ≥ 1 (default 1)
  --json                   print the JSON contract instead of a table

The Laplace default Δ1 = Δ2² is a valid bound for integer count changes
(Σ|v_i| ≤ Σ v_i² when every non-zero |v_i| ≥ 1); Δ2²/Δ∞ is not in general
(v = (2, 1): Δ1 = 3 > 5/2). Pass --l1-sensitivity to use a tighter Δ1.

Exit codes: 0 success, 1 failure, 2 bad flags (one line naming the flag and
its valid range).
`

// calibrateOutput is the JSON contract of `stage calibrate --json`. Field
// names are a contract: add fields, never rename them.
//
//   - mechanism: "dirichlet" | "gaussian" | "laplace".
//   - calibration: dirichlet only.
//   - neighbour (exact only): the relation given with --neighbour;
//     exact_fallback: why the exact calibration fell back to concentrated
//     (omitted when it did not; see mechanism.ExactCovers).
//   - order, rdp_epsilon: the per-release target (λ, ε)-RDP; with --epsilon
//     rdp_epsilon is the planned per-release target.
//   - alpha, r (dirichlet), sigma (gaussian), scale (laplace): the calibrated
//     noise parameters.
//   - l2_sensitivity_sq, linf_sensitivity, l1_sensitivity, lower_bound: the
//     inputs the calibration used (l1_sensitivity for laplace only, with its
//     default filled in; lower_bound for diffuse only).
//   - max_order: the supremum of the orders where the RDP curve is finite;
//     omitted when it is finite everywhere (gaussian, laplace).
//   - rdp: the per-release RDP curve, one {"order", "epsilon"} point per
//     order of the grid (dp_accounting's default orders plus --order).
//     Points where the curve is +Inf (orders ≥ max_order), which JSON cannot
//     represent, are omitted.
//   - rdp_charged (dirichlet only): what one release is charged, rdp plus
//     the release grid's residual (budget.ChargeOf, issue #21), same points.
//   - epsilon, delta, releases (only with --epsilon): the composition of
//     releases releases is (epsilon, delta)-DP, epsilon being what the
//     composed charged curve (rdp_charged for dirichlet, rdp otherwise)
//     converts to (000 Lemma 1 eq. (2), minimized over the
//     grid; ≤ the requested --epsilon); epsilon_order is the order attaining
//     it.
type calibrateOutput struct {
	Mechanism    string     `json:"mechanism"`
	Calibration  string     `json:"calibration,omitempty"`
	Neighbour    string     `json:"neighbour,omitempty"`
	Fallback     string     `json:"exact_fallback,omitempty"`
	Order        float64    `json:"order"`
	RDPEpsilon   float64    `json:"rdp_epsilon"`
	Alpha        *float64   `json:"alpha,omitempty"`
	R            *float64   `json:"r,omitempty"`
	Sigma        *float64   `json:"sigma,omitempty"`
	Scale        *float64   `json:"scale,omitempty"`
	L2Sq         *float64   `json:"l2_sensitivity_sq,omitempty"`
	LInf         *float64   `json:"linf_sensitivity,omitempty"`
	L1           *float64   `json:"l1_sensitivity,omitempty"`
	LowerBound   *float64   `json:"lower_bound,omitempty"`
	MaxOrder     *float64   `json:"max_order,omitempty"`
	RDP          []rdpPoint `json:"rdp"`
	RDPCharged   []rdpPoint `json:"rdp_charged,omitempty"`
	Epsilon      *float64   `json:"epsilon,omitempty"`
	Delta        *float64   `json:"delta,omitempty"`
	Releases     *int       `json:"releases,omitempty"`
	EpsilonOrder *float64   `json:"epsilon_order,omitempty"`
}

type rdpPoint struct {
	Order   float64 `json:"order"`
	Epsilon float64 `json:"epsilon"`
}

// usageError is a bad flag: printed as one line, exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func badFlag(format string, a ...any) error { return &usageError{msg: fmt.Sprintf(format, a...)} }

// floatFlag is a numeric flag kept as text until validated, so that every
// problem is reported by Calibrate in one line with the flag's valid range.
type floatFlag struct {
	raw string
	set bool
}

func (f *floatFlag) String() string     { return f.raw }
func (f *floatFlag) Set(s string) error { f.raw, f.set = s, true; return nil }

// value parses the flag (or def if not set) and checks it with ok; want
// describes the valid range for the error message.
func (f *floatFlag) value(name string, def float64, want string, ok func(float64) bool) (float64, error) {
	if !f.set {
		return def, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(f.raw), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || !ok(v) {
		return 0, badFlag("--%s must be %s, got %q", name, want, f.raw)
	}
	return v, nil
}

func positive(v float64) bool    { return v > 0 }
func nonNegative(v float64) bool { return v >= 0 }
func atLeastOne(v float64) bool  { return v >= 1 }

// flagWant is each flag's valid range, for parse errors (a flag without its
// value).
var flagWant = map[string]string{
	"mechanism":         "dirichlet, gaussian or laplace",
	"calibration":       "concentrated, diffuse, closed-form or exact",
	"neighbour":         "replace or add_remove",
	"order":             "a finite number > 1",
	"rdp-epsilon":       "a finite number > 0",
	"l2-sensitivity-sq": "a finite number > 0",
	"linf-sensitivity":  "a finite number > 0 (≥ 1 for laplace)",
	"l1-sensitivity":    "a finite number ≥ 1",
	"lower-bound":       "a finite number ≥ 0",
	"epsilon":           "a finite number > 0",
	"delta":             "a number in (0, 1)",
	"releases":          "an integer ≥ 1",
	"json":              "true or false",
}

// calibrateArgs are the validated flags.
type calibrateArgs struct {
	spec     mechanism.Spec
	plan     bool // --epsilon given: plan the per-release target
	epsilon  float64
	delta    float64
	releases int
	json     bool
}

// Calibrate implements `stage calibrate`: it calibrates a mechanism for a
// per-release (λ, ε)-RDP target, or plans the per-release target for a total
// (ε, δ)-DP over several composed releases (budget.PlanReleases), and prints
// the noise parameters and the per-release RDP curve (JSON with --json, see
// calibrateOutput; a table otherwise). Exit codes: 0 success, 1 failure,
// 2 bad flags (one line on stderr naming the flag and its valid range).
func Calibrate(args []string, stdout, stderr io.Writer) int {
	if k, ok := papersMechanism(args); ok {
		return calibratePapers(k, args, stdout, stderr) // calibrate_papers.go
	}
	a, err := parseCalibrate(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, calibrateUsage+papersUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "stage calibrate: %v\n", err)
		return 2
	}
	out, err := runCalibrate(a)
	if err != nil {
		fmt.Fprintf(stderr, "stage calibrate: %v\n", err)
		if ue := (*usageError)(nil); errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	if a.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "stage calibrate: write json: %v\n", err)
			return 1
		}
		return 0
	}
	printCalibration(stdout, out)
	return 0
}

func parseCalibrate(args []string) (*calibrateArgs, error) {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	mech := fs.String("mechanism", string(mechanism.Dirichlet), "")
	calib := fs.String("calibration", string(mechanism.Concentrated), "")
	neighbour := fs.String("neighbour", "", "")
	var order, rdpEps, l2sq, linf, l1, lower, eps, delta floatFlag
	fs.Var(&order, "order", "")
	fs.Var(&rdpEps, "rdp-epsilon", "")
	fs.Var(&l2sq, "l2-sensitivity-sq", "")
	fs.Var(&linf, "linf-sensitivity", "")
	fs.Var(&l1, "l1-sensitivity", "")
	fs.Var(&lower, "lower-bound", "")
	fs.Var(&eps, "epsilon", "")
	fs.Var(&delta, "delta", "")
	releases := fs.String("releases", "", "")
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		msg := strings.Replace(err.Error(), " -", " --", 1)
		for name, want := range flagWant {
			if strings.HasSuffix(msg, " --"+name) || strings.Contains(msg, " --"+name+":") {
				msg += "; valid: " + want
				break
			}
		}
		return nil, badFlag("%s (see stage calibrate -h)", msg)
	}
	if fs.NArg() > 0 {
		return nil, badFlag("unexpected argument %q: every input is a --flag (see stage calibrate -h)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	a := &calibrateArgs{json: *asJSON}
	s := &a.spec
	switch k := mechanism.Kind(*mech); k {
	case mechanism.Dirichlet, mechanism.Gaussian, mechanism.Laplace:
		s.Kind = k
	default:
		return nil, badFlag("--mechanism must be one of dirichlet, gaussian, laplace, simplex-dirichlet, laplace-posterior, ehd, ehds, got %q", *mech)
	}
	switch c := mechanism.Calibration(*calib); c {
	case mechanism.Concentrated, mechanism.Diffuse, mechanism.ClosedForm, mechanism.Exact:
		if s.Kind == mechanism.Dirichlet {
			s.Calibration = c
		} // gaussian and laplace take the same flags (issue 2's contract) and ignore it
	default:
		return nil, badFlag("--calibration must be one of concentrated, diffuse, closed-form, exact, got %q", *calib)
	}
	if set["neighbour"] {
		switch nb := mechanism.Neighbour(*neighbour); {
		case s.Kind != mechanism.Dirichlet || s.Calibration != mechanism.Exact:
			return nil, badFlag("--neighbour applies only to --mechanism dirichlet --calibration exact")
		case nb == mechanism.Replace || nb == mechanism.AddRemove:
			s.Neighbour = nb
		default:
			return nil, badFlag("--neighbour must be one of replace, add_remove, got %q", *neighbour)
		}
	}
	var err error
	if s.Order, err = order.value("order", 2, "a finite number > 1", func(v float64) bool { return v > 1 }); err != nil {
		return nil, err
	}

	// Sensitivities: required where the mechanism uses them.
	need := func(f *floatFlag, name, want string, ok func(float64) bool, why string) (float64, error) {
		if !f.set {
			return 0, badFlag("--%s is required %s: %s", name, why, want)
		}
		return f.value(name, 0, want, ok)
	}
	const pos = "a finite number > 0"
	const one = "a finite number ≥ 1"
	switch s.Kind {
	case mechanism.Dirichlet:
		if s.Sensitivity.L2Sq, err = need(&l2sq, "l2-sensitivity-sq", pos, positive, "for --mechanism dirichlet"); err != nil {
			return nil, err
		}
		if s.Sensitivity.LInf, err = need(&linf, "linf-sensitivity", pos, positive, "for --mechanism dirichlet"); err != nil {
			return nil, err
		}
		if l1.set {
			return nil, badFlag("--l1-sensitivity applies only to --mechanism laplace")
		}
	case mechanism.Gaussian:
		if s.Sensitivity.L2Sq, err = need(&l2sq, "l2-sensitivity-sq", pos, positive, "for --mechanism gaussian"); err != nil {
			return nil, err
		}
		if s.Sensitivity.LInf, err = linf.value("linf-sensitivity", 0, pos, positive); err != nil {
			return nil, err
		}
		if l1.set {
			return nil, badFlag("--l1-sensitivity applies only to --mechanism laplace")
		}
	case mechanism.Laplace:
		if s.Sensitivity.LInf, err = need(&linf, "linf-sensitivity", one, atLeastOne, "for --mechanism laplace"); err != nil {
			return nil, err
		}
		if s.Sensitivity.L2Sq, err = l2sq.value("l2-sensitivity-sq", 0, pos, positive); err != nil {
			return nil, err
		}
		switch {
		case l1.set:
			if s.Sensitivity.L1, err = l1.value("l1-sensitivity", 0, one, atLeastOne); err != nil {
				return nil, err
			}
		case l2sq.set:
			// Δ1 ≤ Δ2² for integer count changes (|v_i| ≤ v_i² when
			// |v_i| ≥ 1); Δ2²/Δ∞ would not be a bound (see calibrateUsage).
			s.Sensitivity.L1 = s.Sensitivity.L2Sq
			if !(s.Sensitivity.L1 >= 1) {
				return nil, badFlag("--l1-sensitivity is required for --mechanism laplace when --l2-sensitivity-sq (its default) is below 1: %s", one)
			}
		default:
			return nil, badFlag("--l1-sensitivity is required for --mechanism laplace (or --l2-sensitivity-sq, its default): %s", one)
		}
	}
	if lower.set {
		if s.Kind != mechanism.Dirichlet || s.Calibration != mechanism.Diffuse {
			return nil, badFlag("--lower-bound applies only to --mechanism dirichlet --calibration diffuse")
		}
		if s.LowerBound, err = lower.value("lower-bound", 0, "a finite number ≥ 0", nonNegative); err != nil {
			return nil, err
		}
	}

	// Target: per-release RDP, or a total (ε, δ) to plan for.
	a.plan = eps.set
	switch {
	case a.plan && rdpEps.set:
		return nil, badFlag("--rdp-epsilon and --epsilon are mutually exclusive: give the per-release RDP target, or the total (ε, δ) to plan it from")
	case a.plan:
		if a.epsilon, err = eps.value("epsilon", 0, pos, positive); err != nil {
			return nil, err
		}
		if a.delta, err = delta.value("delta", 1e-6, "a number in (0, 1)", func(v float64) bool { return v > 0 && v < 1 }); err != nil {
			return nil, err
		}
		a.releases = 1
		if set["releases"] {
			n, err := strconv.Atoi(strings.TrimSpace(*releases))
			if err != nil || n < 1 {
				return nil, badFlag("--releases must be an integer ≥ 1, got %q", *releases)
			}
			a.releases = n
		}
	default:
		if delta.set {
			return nil, badFlag("--delta requires --epsilon (the total (ε, δ) to plan for)")
		}
		if set["releases"] {
			return nil, badFlag("--releases requires --epsilon (the total (ε, δ) to plan for)")
		}
		if s.RDPEpsilon, err = need(&rdpEps, "rdp-epsilon", pos, positive, "unless --epsilon is given"); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// fieldFlags maps mechanism.ParamError fields to the flags that set them.
var fieldFlags = map[string]string{
	"kind":              "mechanism",
	"calibration":       "calibration",
	"neighbour":         "neighbour",
	"order":             "order",
	"rdp_epsilon":       "rdp-epsilon",
	"l1_sensitivity":    "l1-sensitivity",
	"l2_sensitivity_sq": "l2-sensitivity-sq",
	"linf_sensitivity":  "linf-sensitivity",
	"lower_bound":       "lower-bound",
}

// flagError turns a calibration error caused by the inputs into a one-line
// usage error naming the flag (exit code 2); other errors pass through.
func flagError(err error, plan bool) error {
	var pe *mechanism.ParamError
	if errors.As(err, &pe) {
		name, ok := fieldFlags[pe.Field]
		if ok && name == "rdp-epsilon" && plan {
			name = "epsilon"
		}
		if ok {
			return badFlag("--%s: %v", name, err)
		}
	}
	if errors.Is(err, budget.ErrInfeasible) || errors.Is(err, budget.ErrInvalidArgument) {
		return badFlag("--epsilon/--delta/--releases: %v", err)
	}
	return err
}

func runCalibrate(a *calibrateArgs) (*calibrateOutput, error) {
	var (
		m     mechanism.Mechanism
		curve budget.Curve
		out   calibrateOutput
	)
	if a.plan {
		p, err := budget.PlanReleases(a.spec, a.epsilon, a.delta, a.releases)
		if err != nil {
			return nil, flagError(err, true)
		}
		m, curve = p.Mechanism, p.PerRelease
		out.Epsilon, out.Delta, out.Releases, out.EpsilonOrder = &p.Epsilon, &p.Delta, &p.Releases, &p.Order
	} else {
		var err error
		if m, err = mechanism.New(a.spec); err != nil {
			return nil, flagError(err, false)
		}
		orders, err := budget.WithOrder(budget.DefaultOrders(), a.spec.Order)
		if err != nil {
			return nil, flagError(err, false)
		}
		curve = budget.CurveOf(m, orders)
		if err := curve.Err(); err != nil {
			return nil, err
		}
	}
	spec, params := m.Spec(), m.Params()
	out.Mechanism = string(spec.Kind)
	out.Order, out.RDPEpsilon = spec.Order, spec.RDPEpsilon
	sens := spec.Sensitivity
	switch spec.Kind {
	case mechanism.Dirichlet:
		out.Calibration = string(spec.Calibration)
		out.Alpha, out.R = ptr(params.Alpha), ptr(params.R)
		out.L2Sq, out.LInf = ptr(sens.L2Sq), ptr(sens.LInf)
		if spec.Calibration == mechanism.Diffuse {
			out.LowerBound = ptr(spec.LowerBound)
		}
		if spec.Calibration == mechanism.Exact {
			out.Neighbour = string(spec.Neighbour)
			if ok, why := mechanism.ExactCovers(spec); !ok {
				out.Fallback = why
			}
		}
	case mechanism.Gaussian:
		out.Sigma = ptr(params.Sigma)
		out.L2Sq = ptr(sens.L2Sq)
		if sens.LInf > 0 {
			out.LInf = ptr(sens.LInf)
		}
	case mechanism.Laplace:
		out.Scale = ptr(params.Scale)
		out.L1, out.LInf = ptr(sens.L1), ptr(sens.LInf)
		if sens.L2Sq > 0 {
			out.L2Sq = ptr(sens.L2Sq)
		}
	}
	if mo := m.MaxOrder(); !math.IsInf(mo, 1) && !math.IsNaN(mo) {
		out.MaxOrder = ptr(mo)
	}
	// rdp is the mechanism's own curve; a rounded (Dirichlet) release is
	// charged it plus the release grid's residual (rdp_charged; with
	// --epsilon the plan composes the charged curve).
	points := func(c budget.Curve) []rdpPoint {
		out := []rdpPoint{}
		for _, p := range c.Points() {
			if !math.IsInf(p.Epsilon, 1) {
				out = append(out, rdpPoint{Order: p.Order, Epsilon: p.Epsilon})
			}
		}
		return out
	}
	out.RDP = points(budget.CurveOf(m, curve.Orders()))
	if mechanism.Rounded(spec.Kind) {
		out.RDPCharged = points(budget.ChargeOf(m, curve.Orders()))
	}
	return &out, nil
}

func ptr[T any](v T) *T { return &v }

// printCalibration prints the human-readable table: parameters, then the
// RDP curve at a few orders (the JSON has the whole grid).
func printCalibration(w io.Writer, o *calibrateOutput) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	mech := o.Mechanism
	if o.Calibration != "" {
		mech += " (" + o.Calibration + ")"
	}
	fmt.Fprintf(tw, "mechanism\t%s\n", mech)
	fmt.Fprintf(tw, "per release\t(λ=%s, ε=%s)-RDP\n", g(o.Order), g(o.RDPEpsilon))
	var sens []string
	if o.L1 != nil {
		sens = append(sens, "Δ1="+g(*o.L1))
	}
	if o.L2Sq != nil {
		sens = append(sens, "Δ2²="+g(*o.L2Sq))
	}
	if o.LInf != nil {
		sens = append(sens, "Δ∞="+g(*o.LInf))
	}
	if o.LowerBound != nil {
		sens = append(sens, "lower bound b="+g(*o.LowerBound))
	}
	if o.Neighbour != "" {
		sens = append(sens, "neighbour "+o.Neighbour)
	}
	fmt.Fprintf(tw, "sensitivity\t%s\n", strings.Join(sens, "  "))
	switch {
	case o.Alpha != nil:
		fmt.Fprintf(tw, "parameters\tα=%s  r=%s  (release Dir(r·x + α))\n", g(*o.Alpha), g(*o.R))
	case o.Sigma != nil:
		fmt.Fprintf(tw, "parameters\tσ=%s  (noise standard deviation per count)\n", g(*o.Sigma))
	case o.Scale != nil:
		fmt.Fprintf(tw, "parameters\tb=%s  (Laplace scale per count)\n", g(*o.Scale))
	}
	if o.MaxOrder != nil {
		fmt.Fprintf(tw, "max order\t%s  (no RDP bound at or beyond it)\n", g(*o.MaxOrder))
	}
	if o.Fallback != "" {
		fmt.Fprintf(tw, "note\t%s\n", o.Fallback)
	}
	if o.Epsilon != nil {
		fmt.Fprintf(tw, "composition\t%d releases are (ε=%s, δ=%s)-DP (best order λ=%s)\n", *o.Releases, g(*o.Epsilon), g(*o.Delta), g(*o.EpsilonOrder))
	}
	fmt.Fprintf(tw, "\nRDP curve of one release (selected orders; --json prints the whole grid)\n")
	fmt.Fprintf(tw, "  order λ\tε(λ)\n")
	show := map[float64]bool{o.Order: true}
	for _, x := range []float64{1.5, 2, 3, 4, 5, 8, 16, 32, 64, 128, 256, 512, 1024} {
		show[x] = true
	}
	if o.EpsilonOrder != nil {
		show[*o.EpsilonOrder] = true
	}
	for _, p := range o.RDP {
		if show[p.Order] {
			fmt.Fprintf(tw, "  %s\t%s\n", g(p.Order), g(p.Epsilon))
		}
	}
	if o.MaxOrder != nil {
		fmt.Fprintf(tw, "  ≥ %s\t+Inf\n", g(*o.MaxOrder))
	}
	tw.Flush()
}

func g(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
