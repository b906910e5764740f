package mechanism

// New validates spec and calibrates the mechanism it names. Every problem is
// reported as a *ParamError (errors.Is(err, ErrInvalidParameter)); New never
// panics. Requirements:
//
//   - Kind is Dirichlet, Gaussian or Laplace, or one of the kinds
//     configured by their own spec — SimplexDirichlet (Spec.Simplex, see
//     SimplexSpec) and LaplacePosterior, EHD, EHDS (Spec.Posterior, see
//     PosteriorSpec) — whose guarantees are ε- or (ε, δ)-DP (ApproxDP) and
//     for which the rules below do not apply (they reject RDPEpsilon,
//     sensitivities, Calibration and LowerBound, and ignore Order).
//   - Order λ is finite and > 1; RDPEpsilon ε is finite and > 0.
//   - Every sensitivity is finite and ≥ 0, and those the mechanism uses are
//     > 0: Dirichlet needs L2Sq and LInf; Gaussian needs L2Sq; Laplace needs
//     L1 ≥ 1 and LInf ≥ 1 (it acts on integer counts, whose changes are whole
//     numbers; fractional parts are dropped).
//   - Neighbour is empty, Replace or AddRemove (only Exact uses it).
//   - Calibration is empty (meaning Concentrated), Concentrated, ClosedForm,
//     Diffuse, Exact or Optimal (which needs ExpectedEvents > 0 and Bins ≥ 2;
//     other calibrations refuse them). Gaussian and Laplace ignore it (a known value is accepted so
//     that a configuration-wide default does not break them) and their Spec()
//     reports it empty.
//   - LowerBound is finite and ≥ 0, and may be non-zero only with the Diffuse
//     calibration (001 Remark 2).
//
// The returned Mechanism's Spec() is spec with defaults filled in. Its RDP at
// spec.Order is ≤ spec.RDPEpsilon exactly (as computed in float64): equal to
// it up to the last bits for Concentrated and Diffuse, up to the dyadic
// rounding of the noise scale (relative ~1e-12) for Gaussian and Laplace, and
// strictly below it for ClosedForm, whose eq. (9) is a relaxation of eq. (8)
// (and for Gaussian/Laplace targets so loose that the scale is clamped to its
// minimum, see additive.go).
func New(spec Spec) (Mechanism, error) {
	switch spec.Kind {
	case Dirichlet, Gaussian, Laplace:
		if spec.Simplex != nil || spec.Posterior != nil {
			return nil, paramErr("kind", string(spec.Kind), "takes neither a simplex nor a posterior spec")
		}
	case SimplexDirichlet:
		return asMechanism(newSimplexDirichlet(spec))
	case LaplacePosterior, EHD, EHDS:
		return newPosteriorMechanism(spec)
	default:
		return nil, paramErr("kind", string(spec.Kind), `must be one of "dirichlet", "gaussian", "laplace", "simplex-dirichlet", "laplace-posterior", "ehd", "ehds"`)
	}
	switch spec.Calibration {
	case "", Concentrated, ClosedForm, Diffuse, Exact, Optimal:
	default:
		return nil, paramErr("calibration", string(spec.Calibration), `must be one of "concentrated", "closed-form", "diffuse", "exact", "optimal" (or empty for concentrated)`)
	}
	if spec.Kind == Dirichlet && spec.Calibration == Optimal {
		if err := checkFinitePositive("expected_events", spec.ExpectedEvents); err != nil {
			return nil, err
		}
		if spec.Bins < 2 {
			return nil, paramErr("bins", float64(spec.Bins), "must be >= 2 for the optimal calibration (its error model is over the bins)")
		}
	} else if spec.ExpectedEvents != 0 || spec.Bins != 0 {
		if spec.Kind == Dirichlet {
			return nil, paramErr("expected_events", spec.ExpectedEvents, "and bins are used by the optimal calibration only")
		}
		spec.ExpectedEvents, spec.Bins = 0, 0 // a config-wide planning figure does not break Gaussian/Laplace
	}
	switch spec.Neighbour {
	case AnyNeighbour, Replace, AddRemove:
	default:
		return nil, paramErr("neighbour", string(spec.Neighbour), `must be one of "replace", "add_remove" (or empty for any pair within the sensitivities)`)
	}
	if err := checkOrder("order", spec.Order); err != nil {
		return nil, err
	}
	if err := checkFinitePositive("rdp_epsilon", spec.RDPEpsilon); err != nil {
		return nil, err
	}
	s := spec.Sensitivity
	for _, c := range []struct {
		field string
		v     float64
	}{{"l1_sensitivity", s.L1}, {"l2_sensitivity_sq", s.L2Sq}, {"linf_sensitivity", s.LInf}, {"lower_bound", spec.LowerBound}} {
		if err := checkFiniteNonNegative(c.field, c.v); err != nil {
			return nil, err
		}
	}
	if spec.LowerBound != 0 && (spec.Kind != Dirichlet || spec.Calibration != Diffuse) {
		return nil, paramErr("lower_bound", spec.LowerBound, "must be 0 unless kind is dirichlet with the diffuse calibration")
	}
	switch spec.Kind {
	case Dirichlet:
		if spec.Calibration == "" {
			spec.Calibration = Concentrated
		}
		if err := checkFinitePositive("l2_sensitivity_sq", s.L2Sq); err != nil {
			return nil, err
		}
		if err := checkFinitePositive("linf_sensitivity", s.LInf); err != nil {
			return nil, err
		}
		if spec.Calibration == Exact {
			return newExact(spec)
		}
		if spec.Calibration == Optimal {
			return newOptimal(spec)
		}
		return asMechanism(newDirichlet(spec))
	case Gaussian:
		spec.Calibration = ""
		if err := checkFinitePositive("l2_sensitivity_sq", s.L2Sq); err != nil {
			return nil, err
		}
		return asMechanism(newGaussian(spec))
	default: // Laplace
		spec.Calibration = ""
		if !(s.L1 >= 1) {
			return nil, paramErr("l1_sensitivity", s.L1, "must be >= 1 for the laplace mechanism (integer counts change by whole numbers)")
		}
		if !(s.LInf >= 1) {
			return nil, paramErr("linf_sensitivity", s.LInf, "must be >= 1 for the laplace mechanism (integer counts change by whole numbers)")
		}
		return asMechanism(newLaplace(spec))
	}
}

// asMechanism converts a constructor's result to the interface, returning a
// nil interface (not a typed nil pointer) on error.
func asMechanism[M Mechanism](m M, err error) (Mechanism, error) {
	if err != nil {
		return nil, err
	}
	return m, nil
}
