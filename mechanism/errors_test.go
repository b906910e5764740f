package mechanism

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestNewBadInputs(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	good := func() Spec { return example }
	cases := []struct {
		name   string
		mod    func(*Spec)
		field  string
		accept map[Calibration]bool // calibrations for which the spec is valid
	}{
		{"empty kind", func(s *Spec) { s.Kind = "" }, "kind", nil},
		{"unknown kind", func(s *Spec) { s.Kind = "exponential" }, "kind", nil},
		{"unknown calibration", func(s *Spec) { s.Calibration = "tight" }, "calibration", nil},
		{"order 1", func(s *Spec) { s.Order = 1 }, "order", nil},
		{"order 0.5", func(s *Spec) { s.Order = 0.5 }, "order", nil},
		{"order NaN", func(s *Spec) { s.Order = nan }, "order", nil},
		{"order +Inf", func(s *Spec) { s.Order = inf }, "order", nil},
		{"eps 0", func(s *Spec) { s.RDPEpsilon = 0 }, "rdp_epsilon", nil},
		{"eps < 0", func(s *Spec) { s.RDPEpsilon = -1 }, "rdp_epsilon", nil},
		{"eps NaN", func(s *Spec) { s.RDPEpsilon = nan }, "rdp_epsilon", nil},
		{"eps Inf", func(s *Spec) { s.RDPEpsilon = inf }, "rdp_epsilon", nil},
		{"l2 negative", func(s *Spec) { s.Sensitivity.L2Sq = -2 }, "l2_sensitivity_sq", nil},
		{"l2 zero", func(s *Spec) { s.Sensitivity.L2Sq = 0 }, "l2_sensitivity_sq", nil},
		{"l2 NaN", func(s *Spec) { s.Sensitivity.L2Sq = nan }, "l2_sensitivity_sq", nil},
		{"linf zero", func(s *Spec) { s.Sensitivity.LInf = 0 }, "linf_sensitivity", nil},
		{"linf Inf", func(s *Spec) { s.Sensitivity.LInf = inf }, "linf_sensitivity", nil},
		{"l1 negative", func(s *Spec) { s.Sensitivity.L1 = -1 }, "l1_sensitivity", nil},
		{"lower bound without diffuse", func(s *Spec) { s.LowerBound = 1 }, "lower_bound", map[Calibration]bool{Diffuse: true}},
		{"lower bound negative", func(s *Spec) { s.Calibration = Diffuse; s.LowerBound = -1 }, "lower_bound", nil},
		{"lower bound NaN", func(s *Spec) { s.Calibration = Diffuse; s.LowerBound = nan }, "lower_bound", nil},
		{"gaussian l2 zero", func(s *Spec) { s.Kind = Gaussian; s.Sensitivity.L2Sq = 0 }, "l2_sensitivity_sq", nil},
		{"gaussian lower bound", func(s *Spec) { s.Kind = Gaussian; s.Calibration = Diffuse; s.LowerBound = 1 }, "lower_bound", nil},
		{"gaussian eps too small", func(s *Spec) { s.Kind = Gaussian; s.RDPEpsilon = 1e-300 }, "rdp_epsilon", nil},
		{"laplace l1 zero", func(s *Spec) { s.Kind = Laplace; s.Sensitivity.L1 = 0 }, "l1_sensitivity", nil},
		{"laplace l1 < 1", func(s *Spec) { s.Kind = Laplace; s.Sensitivity.L1 = 0.5 }, "l1_sensitivity", nil},
		{"laplace linf < 1", func(s *Spec) { s.Kind = Laplace; s.Sensitivity.L1 = 2; s.Sensitivity.LInf = 0.5 }, "linf_sensitivity", nil},
		{"laplace l1 Inf", func(s *Spec) { s.Kind = Laplace; s.Sensitivity.L1 = inf }, "l1_sensitivity", nil},
		{"laplace eps too small", func(s *Spec) { s.Kind = Laplace; s.Sensitivity.L1 = 2; s.RDPEpsilon = 1e-300 }, "rdp_epsilon", nil},
		{"dirichlet eps overflow", func(s *Spec) { s.RDPEpsilon = 1e308; s.Sensitivity.L2Sq = 1e-308 }, "rdp_epsilon", map[Calibration]bool{ClosedForm: true}},
		{"dirichlet tiny eps", func(s *Spec) { s.RDPEpsilon = 1e-320 }, "rdp_epsilon", map[Calibration]bool{Diffuse: true}},
	}
	for _, c := range cases {
		for _, cal := range []Calibration{"", Concentrated, ClosedForm, Diffuse} {
			s := good()
			s.Calibration = cal
			c.mod(&s)
			m, err := New(s)
			if err == nil {
				if c.accept[cal] {
					continue
				}
				t.Errorf("%s/%q: New accepted %+v", c.name, cal, s)
				continue
			}
			if m != nil {
				t.Errorf("%s: non-nil mechanism with error", c.name)
			}
			var pe *ParamError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidParameter) {
				t.Errorf("%s: error %v is not a *ParamError matching ErrInvalidParameter", c.name, err)
				continue
			}
			if pe.Field != c.field {
				t.Errorf("%s/%q: field %q, want %q (%v)", c.name, cal, pe.Field, c.field, err)
			}
			checkMessage(t, err)
		}
	}
	// Extreme but valid values must either work or fail with a typed error,
	// never panic or yield NaN.
	for _, eps := range []float64{1e-300, 1e-30, 1e-12, 1e12, 1e300} {
		for _, order := range []float64{1 + 1e-12, 1.5, 1e6, 1e300} {
			for _, kind := range []Kind{Dirichlet, Gaussian, Laplace} {
				for _, cal := range []Calibration{Concentrated, ClosedForm, Diffuse} {
					s := Spec{Kind: kind, Calibration: cal, Order: order, RDPEpsilon: eps, Sensitivity: Sensitivity{L1: 2, L2Sq: 2, LInf: 1}}
					m, err := New(s)
					if err != nil {
						if !errors.Is(err, ErrInvalidParameter) {
							t.Errorf("%+v: untyped error %v", s, err)
						}
						checkMessage(t, err)
						continue
					}
					if v := m.RDP(order); math.IsNaN(v) || v > eps {
						t.Errorf("%+v: RDP(order) = %g", s, v)
					}
					p := m.Params()
					for _, f := range []float64{p.Alpha, p.R, p.Sigma, p.Scale} {
						if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
							t.Errorf("%+v: bad params %+v", s, p)
						}
					}
				}
			}
		}
	}
}

func checkMessage(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if !strings.HasPrefix(msg, "mechanism: ") {
		t.Errorf("message %q lacks the package prefix", msg)
	}
	if strings.ToLower(msg[:12]) != msg[:12] {
		t.Errorf("message %q does not start lowercase", msg)
	}
}

func TestErrorMessage(t *testing.T) {
	_, err := New(Spec{Kind: Dirichlet, Order: 0.5, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}})
	if got, want := err.Error(), "mechanism: order must be > 1, got 0.5"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	_, err = New(Spec{Kind: "foo"})
	if got, want := err.Error(), `mechanism: kind must be one of "dirichlet", "gaussian", "laplace", "simplex-dirichlet", "laplace-posterior", "ehd", "ehds", got "foo"`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	wrapped := errors.Join(errors.New("calibrate"), err)
	if !errors.Is(wrapped, ErrInvalidParameter) {
		t.Errorf("wrapped error lost ErrInvalidParameter")
	}
}

func TestReleaseBadInputs(t *testing.T) {
	rng := NewSeededRand(seed(20))
	nan, inf := math.NaN(), math.Inf(1)
	for _, s := range []Spec{
		example,
		{Kind: Gaussian, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2}},
		{Kind: Laplace, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L1: 2, LInf: 1}},
	} {
		m := mustNew(t, s)
		cases := []struct {
			name   string
			rng    *Rand
			counts []float64
			out    []float64
			field  string
		}{
			{"nil rng", nil, []float64{1, 2}, make([]float64, 2), "rng"},
			{"d = 1", rng, []float64{1}, make([]float64, 1), "counts"},
			{"d = 0", rng, nil, nil, "counts"},
			{"short out", rng, []float64{1, 2, 3}, make([]float64, 2), "out"},
			{"long out", rng, []float64{1, 2}, make([]float64, 3), "out"},
			{"negative", rng, []float64{1, -1}, make([]float64, 2), "counts[1]"},
			{"NaN", rng, []float64{nan, 1}, make([]float64, 2), "counts[0]"},
			{"Inf", rng, []float64{1, 2, inf}, make([]float64, 3), "counts[2]"},
			{"-Inf", rng, []float64{math.Inf(-1), 2}, make([]float64, 2), "counts[0]"},
		}
		if s.Kind != Dirichlet {
			cases = append(cases,
				struct {
					name   string
					rng    *Rand
					counts []float64
					out    []float64
					field  string
				}{"fractional", rng, []float64{1.5, 2}, make([]float64, 2), "counts[0]"},
				struct {
					name   string
					rng    *Rand
					counts []float64
					out    []float64
					field  string
				}{"above 2^53", rng, []float64{1, 0x1p60}, make([]float64, 2), "counts[1]"},
			)
		} else {
			cases = append(cases, struct {
				name   string
				rng    *Rand
				counts []float64
				out    []float64
				field  string
			}{"shape overflow", rng, []float64{1, math.MaxFloat64}, make([]float64, 2), "counts"})
		}
		for _, c := range cases {
			for i := range c.out {
				c.out[i] = 42
			}
			err := m.Release(c.rng, c.counts, c.out)
			var pe *ParamError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidParameter) {
				t.Errorf("%s/%s: error %v", s.Kind, c.name, err)
				continue
			}
			if pe.Field != c.field {
				t.Errorf("%s/%s: field %q, want %q", s.Kind, c.name, pe.Field, c.field)
			}
			checkMessage(t, err)
			for _, v := range c.out {
				if v != 42 {
					t.Errorf("%s/%s: out written on error", s.Kind, c.name)
					break
				}
			}
		}
	}
}

func TestDirichletRenyiBadInputs(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		name      string
		order     float64
		u, uPrime []float64
		field     string
	}{
		{"order 1", 1, []float64{1, 2}, []float64{1, 2}, "order"},
		{"order NaN", nan, []float64{1, 2}, []float64{1, 2}, "order"},
		{"order Inf", math.Inf(1), []float64{1, 2}, []float64{1, 2}, "order"},
		{"d = 1", 2, []float64{1}, []float64{1}, "u"},
		{"length mismatch", 2, []float64{1, 2}, []float64{1, 2, 3}, "u_prime"},
		{"zero u", 2, []float64{0, 2}, []float64{1, 2}, "u[0]"},
		{"negative u'", 2, []float64{1, 2}, []float64{1, -2}, "u_prime[1]"},
		{"NaN u", 2, []float64{1, nan}, []float64{1, 2}, "u[1]"},
		{"Inf u'", 2, []float64{1, 2}, []float64{math.Inf(1), 2}, "u_prime[0]"},
	}
	for _, c := range cases {
		v, err := DirichletRenyi(c.order, c.u, c.uPrime)
		var pe *ParamError
		if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidParameter) {
			t.Errorf("%s: (%g, %v)", c.name, v, err)
			continue
		}
		if pe.Field != c.field {
			t.Errorf("%s: field %q, want %q", c.name, pe.Field, c.field)
		}
		checkMessage(t, err)
	}
}

// TestRDPNeverNaN: RDP answers +Inf (never NaN, never a panic) for orders
// outside (1, MaxOrder), and finite values inside.
func TestRDPNeverNaN(t *testing.T) {
	for _, s := range []Spec{
		example,
		{Kind: Dirichlet, Calibration: Diffuse, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2, LInf: 1}, LowerBound: 1},
		{Kind: Gaussian, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2}},
		{Kind: Laplace, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L1: 2, LInf: 1}},
	} {
		m := mustNew(t, s)
		for _, o := range []float64{math.NaN(), math.Inf(-1), -1, 0, 1, math.Inf(1)} {
			if v := m.RDP(o); !math.IsInf(v, 1) {
				t.Errorf("%s: RDP(%g) = %g, want +Inf", s.Kind, o, v)
			}
		}
		for _, o := range []float64{1 + 1e-12, 1.0001, 1.5, 2, 10, 1e3, 1e9} {
			v := m.RDP(o)
			if math.IsNaN(v) || v < 0 {
				t.Errorf("%s: RDP(%g) = %g", s.Kind, o, v)
			}
			if o < m.MaxOrder() && math.IsInf(v, 0) && o < 1e3 {
				t.Errorf("%s: RDP(%g) = %g below MaxOrder %g", s.Kind, o, v, m.MaxOrder())
			}
		}
		if s.Kind == Dirichlet && s.Calibration == "" {
			if got := m.Spec().Calibration; got != Concentrated {
				t.Errorf("Spec() calibration %q, want concentrated filled in", got)
			}
		}
	}
	// Gaussian and Laplace accept (and clear) a calibration name.
	m := mustNew(t, Spec{Kind: Gaussian, Calibration: Concentrated, Order: 2, RDPEpsilon: 1, Sensitivity: Sensitivity{L2Sq: 2}})
	if m.Spec().Calibration != "" {
		t.Errorf("gaussian Spec().Calibration = %q, want empty", m.Spec().Calibration)
	}
}
