package mechanism

// Kind names a mechanism. The strings are a contract (config files and the
// `stage calibrate` JSON use them).
type Kind string

const (
	// Dirichlet releases one draw y ~ Dir(r·x + α) (000 eq. (4), Corollary 3).
	Dirichlet Kind = "dirichlet"
	// Gaussian adds discrete Gaussian noise to the counts and projects the
	// result onto the simplex.
	Gaussian Kind = "gaussian"
	// Laplace adds discrete Laplace noise to the counts and projects the
	// result onto the simplex.
	Laplace Kind = "laplace"
	// SimplexDirichlet releases Dir(k·p) for an input p that already is a
	// probability vector, with the (ε, δ)-DP of 003 Theorems 1–2
	// (configured by Spec.Simplex; see simplex.go).
	SimplexDirichlet Kind = "simplex-dirichlet"
	// LaplacePosterior releases a private posterior Dir(α̃) by Laplace noise
	// on the posterior parameters, ε-DP (002 LSHist/LSDim, 004 §4.1.3–4.1.4;
	// configured by Spec.Posterior; see posterior.go).
	LaplacePosterior Kind = "laplace-posterior"
	// EHD is the exponential mechanism over candidate posteriors scored by
	// Hellinger distance with global sensitivity, ε-DP (002 Algorithm 3, 004
	// §4.1.1; configured by Spec.Posterior; see hellinger.go).
	EHD Kind = "ehd"
	// EHDS is the same with smooth sensitivity, (ε, δ)-DP (002 Algorithm 5,
	// 004 §4.2; configured by Spec.Posterior; see hellinger.go).
	EHDS Kind = "ehds"
)

// Calibration names how the Dirichlet mechanism's (r, α) are solved from the
// target (λ, ε). The strings are a contract.
type Calibration string

const (
	// Concentrated: r = 1 and the smallest α_m with
	// ½·λ·Δ2²·ψ′(α_m − (λ−1)Δ∞) = ε (000 Theorem 2, eq. (8)).
	Concentrated Calibration = "concentrated"
	// ClosedForm: r = 1 and α_m = λΔ2²/(2ε) + (λ−1)Δ∞ + 1 (000 eq. (9)).
	ClosedForm Calibration = "closed-form"
	// Diffuse: 001 Algorithm 1, r solving ε = ½·λ·r²·Δ2²·ψ′(1 + rb + 3(λ−1)rΔ∞)
	// and α = 1 + 4(λ−1)rΔ∞ (b = 0 unless a lower bound is known, Remark 2).
	Diffuse Calibration = "diffuse"
	// Exact: r = 1 and the smallest α whose exact worst-case divergence
	// (000 eq. (19) maximized over the admissible neighbours) is ε; falls
	// back to Concentrated where the worst-case argument does not apply
	// (exact.go).
	Exact Calibration = "exact"
	// Optimal: the (r, α) on 000 Corollary 3's frontier at (λ, ε) — on the
	// exact frontier where Exact's argument applies — that minimizes the
	// expected ℓ2 error of one release at Spec.ExpectedEvents events over
	// Spec.Bins bins (optimal.go).
	Optimal Calibration = "optimal"
)

// Sensitivity bounds how much one privacy unit can change the count vector
// handed to a mechanism, under the neighbour relation in force. The caller
// derives it from its contribution bounds; a mechanism never assumes it.
type Sensitivity struct {
	L1   float64 // Δ1 = sup ‖x − x′‖₁
	L2Sq float64 // Δ2² = sup ‖x − x′‖₂²
	LInf float64 // Δ∞ = sup ‖x − x′‖∞
}

// Spec is what a mechanism is calibrated from.
type Spec struct {
	Kind        Kind
	Calibration Calibration // Dirichlet only; empty means Concentrated
	Order       float64     // RDP order λ > 1 the target is stated at
	RDPEpsilon  float64     // target ε > 0 of one release at Order
	Sensitivity Sensitivity
	// LowerBound is Remark 2's (001) known lower bound b ≥ 0 on every count;
	// Diffuse only. Zero unless the data guarantees it. Release raises counts
	// below it to it, which keeps the guarantee (see dirichletRDP).
	LowerBound float64
	// Neighbour is the relation the sensitivities were derived under; only
	// the Exact calibration uses it (exact.go). Empty: any pair within the
	// sensitivities.
	Neighbour Neighbour
	// ExpectedEvents (N) and Bins (d) are the public planning figures the
	// Optimal calibration minimizes its error model at: the events one
	// release typically counts and the number of bins. Optimal only.
	ExpectedEvents float64
	Bins           int
	// Simplex configures the simplex-dirichlet kind (nil for other kinds).
	Simplex *SimplexSpec
	// Posterior configures the laplace-posterior, ehd and ehds kinds (nil
	// for other kinds).
	Posterior *PosteriorSpec
}

// ErrorModel is implemented by mechanisms that state the error their
// calibration expects (the Optimal calibration): the root-mean-square ℓ2
// error of one release at Spec.ExpectedEvents (see DirichletExpectedError).
type ErrorModel interface {
	ExpectedError() float64
}

// Params are the calibrated noise parameters. Only the fields of the
// mechanism's kind are set.
type Params struct {
	Alpha float64 // Dirichlet: prior α (the same for every bin)
	R     float64 // Dirichlet: concentration r
	Sigma float64 // Gaussian: σ of the discrete Gaussian N_Z(0, σ²) added to each count (its standard deviation is slightly below σ)
	Scale float64 // Laplace, laplace-posterior: scale b of the discrete Laplace (P[z] ∝ e^{−|z|/b}) added to each count
	K     float64 // simplex-dirichlet: concentration k of Dir(k·p)
	Gamma float64 // simplex-dirichlet: γ of Ω₁ (003 eq. (3)) behind the reported (ε, δ)
	// HellingerSensitivity is the sensitivity bound of the Hellinger score
	// used in the exponent (ehd: global, 004 §4.1.1; ehds: 0, the smooth
	// sensitivity depends on the data).
	HellingerSensitivity float64
	Smoothing            float64 // ehds: γ of the γ-smooth sensitivity (004 §4.2.1, re-derived)
	// Prior is the public prior α₀ of every bin of a [CountPosterior]
	// (the stage's laplace-posterior); 0 for other mechanisms.
	Prior float64
}

// Mechanism is a calibrated mechanism. Implementations are immutable after
// New and safe for concurrent use; randomness comes from the caller's *Rand,
// one per goroutine, so no lock serializes releases.
type Mechanism interface {
	// Spec returns the spec the mechanism was calibrated from.
	Spec() Spec
	// Params returns the calibrated noise parameters.
	Params() Params
	// RDP returns the ε(λ) of one release at order λ > 1, for the
	// sensitivities of the spec; +Inf where no bound applies: for orders
	// ≥ MaxOrder(), and for orders that are not finite and > 1 (NaN
	// included). It never returns NaN. The curve also bounds the total
	// divergence of one release per group when a unit's change is spread
	// over several groups' count vectors within the same sensitivities
	// (see the package documentation).
	RDP(order float64) float64
	// MaxOrder is the supremum of the orders at which RDP is finite (+Inf if
	// it is finite at every order).
	MaxOrder() float64
	// Release writes one private normalized histogram of counts into out,
	// which must have len(counts) ≥ 2 entries. counts must be finite and ≥ 0
	// (and whole numbers ≤ 2^53 for Gaussian and Laplace). The output is a
	// point of the simplex: entries ≥ 0 summing to 1 — for the mechanisms
	// sampled in floating point ([Unrounded]) exactly n_i/Q with Σ n_i = Q,
	// Q = ReleaseGrid(len(counts)) (see "Release grid" in the package
	// documentation).
	// Invalid arguments give a *ParamError and leave out untouched. out may
	// be counts itself. Release does not allocate.
	Release(rng *Rand, counts []float64, out []float64) error
}
