package budget

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestDefaultOrders(t *testing.T) {
	o := DefaultOrders()
	if len(o) != 156 {
		t.Fatalf("len = %d, want 156 (99 + 53 + 4)", len(o))
	}
	if err := validateOrders(o); err != nil {
		t.Fatal(err)
	}
	for x := 1; x < 100; x++ {
		if want := 1 + float64(x)/10; o[x-1] != want {
			t.Errorf("o[%d] = %v, want %v", x-1, o[x-1], want)
		}
	}
	if o[0] != 1.1 || o[98] != 10.9 || o[99] != 11 || o[151] != 63 {
		t.Errorf("grid ends wrong: %v %v %v %v", o[0], o[98], o[99], o[151])
	}
	if !slices.Equal(o[152:], []float64{128, 256, 512, 1024}) {
		t.Errorf("tail = %v", o[152:])
	}
	o[0] = 99 // a copy: mutation must not leak
	if DefaultOrders()[0] != 1.1 {
		t.Fatal("DefaultOrders returned shared storage")
	}
}

func TestWithOrder(t *testing.T) {
	o, err := WithOrder(DefaultOrders(), 2.25)
	if err != nil || len(o) != 157 || validateOrders(o) != nil {
		t.Fatalf("WithOrder(2.25): len %d, err %v", len(o), err)
	}
	if i, found := slices.BinarySearch(o, 2.25); !found || o[i] != 2.25 {
		t.Fatal("2.25 not inserted")
	}
	o2, err := WithOrder(DefaultOrders(), 2) // already on the grid (1 + 10/10 == 2 exactly)
	if err != nil || len(o2) != 156 {
		t.Fatalf("WithOrder(2): len %d, err %v", len(o2), err)
	}
	o3, err := WithOrder(DefaultOrders(), 5000)
	if err != nil || o3[len(o3)-1] != 5000 {
		t.Fatalf("WithOrder(5000): %v", err)
	}
	for _, bad := range []float64{1, 0.5, -2, math.NaN(), math.Inf(1)} {
		if _, err := WithOrder(DefaultOrders(), bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("WithOrder(%v): err = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, err := WithOrder(nil, 2); !errors.Is(err, ErrEmptyCurve) {
		t.Errorf("WithOrder(nil): %v", err)
	}
	if _, err := WithOrder([]float64{3, 2}, 2.5); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("unsorted grid: %v", err)
	}
}

func TestNewCurveErrors(t *testing.T) {
	g := []float64{1.5, 2, 4}
	cases := []struct {
		name   string
		orders []float64
		eps    []float64
		want   error
	}{
		{"empty", nil, nil, ErrEmptyCurve},
		{"nan eps", g, []float64{1, math.NaN(), 1}, ErrInvalidArgument},
		{"negative eps", g, []float64{1, -1e-300, 1}, ErrInvalidArgument},
		{"length", g, []float64{1, 2}, ErrGridMismatch},
		{"order 1", []float64{1, 2}, []float64{1, 1}, ErrInvalidArgument},
		{"order nan", []float64{math.NaN(), 2}, []float64{1, 1}, ErrInvalidArgument},
		{"order inf", []float64{2, math.Inf(1)}, []float64{1, 1}, ErrInvalidArgument},
		{"duplicate", []float64{2, 2}, []float64{1, 1}, ErrInvalidArgument},
	}
	for _, tc := range cases {
		if _, err := NewCurve(tc.orders, tc.eps); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	c, err := NewCurve(g, []float64{0, math.Inf(1), 3})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := c.At(4); !ok || v != 3 {
		t.Errorf("At(4) = %v, %v", v, ok)
	}
	if _, ok := c.At(3); ok {
		t.Error("At(3) off the grid reported on it")
	}
}

type funcCurve func(float64) float64

func (f funcCurve) RDP(o float64) float64 { return f(o) }

type maxOrderCurve struct {
	funcCurve
	max float64
}

func (m maxOrderCurve) MaxOrder() float64 { return m.max }

func TestCurveOfConservative(t *testing.T) {
	g := []float64{1.5, 2, 3, 4}
	bad := funcCurve(func(o float64) float64 {
		switch o {
		case 1.5:
			return math.NaN()
		case 2:
			return -0.5
		}
		return o
	})
	c := CurveOf(bad, g)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	want := []float64{math.Inf(1), math.Inf(1), 3, 4}
	if !slices.Equal(c.Epsilons(), want) {
		t.Errorf("CurveOf = %v, want %v (NaN and negative → +Inf)", c.Epsilons(), want)
	}
	// Orders ≥ MaxOrder are +Inf even if RDP claims otherwise.
	c = CurveOf(maxOrderCurve{funcCurve(func(o float64) float64 { return 1 }), 3}, g)
	if want := []float64{1, 1, math.Inf(1), math.Inf(1)}; !slices.Equal(c.Epsilons(), want) {
		t.Errorf("CurveOf with MaxOrder 3 = %v, want %v", c.Epsilons(), want)
	}
	// Invalid grid: the curve carries the error to every operation.
	c = CurveOf(gaussCurve{1, 1}, []float64{2, 1.5})
	if !errors.Is(c.Err(), ErrInvalidArgument) {
		t.Fatalf("Err = %v", c.Err())
	}
	if err := c.Scale(2).Err(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Scale on invalid curve: %v", err)
	}
	if _, _, err := c.Epsilon(1e-6); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Epsilon on invalid curve: %v", err)
	}
	if e, o := ToEpsilon(c, 1e-6); !math.IsInf(e, 1) || o != 0 {
		t.Errorf("ToEpsilon on invalid curve = %v, %v; want +Inf (no guarantee)", e, o)
	}
	if d, _ := ToDelta(c, 1); d != 1 {
		t.Errorf("ToDelta on invalid curve = %v; want 1 (no guarantee)", d)
	}
	if c := CurveOf(nil, g); c.Err() == nil {
		t.Error("CurveOf(nil) has no error")
	}
}

// Composition of the Gaussian mechanism with σ = 1, Δ2 = 1: one release is
// ε̂(λ) = λ/2 (Mironov 2017), k releases kλ/2 (000 Lemma 2).
func TestGaussianComposition(t *testing.T) {
	orders := DefaultOrders()
	one := CurveOf(gaussCurve{l2sq: 1, sigma: 1}, orders)
	const k = 37
	sum, err := ZeroCurve(orders)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < k; i++ {
		sum = sum.Add(one)
	}
	scaled := one.Scale(k)
	if sum.Err() != nil || scaled.Err() != nil {
		t.Fatal(sum.Err(), scaled.Err())
	}
	for i, lam := range orders {
		want := k * lam / 2
		if got := sum.Epsilons()[i]; math.Abs(got-want) > 1e-13*want {
			t.Errorf("λ=%v: sum of %d = %v, want %v", lam, k, got, want)
		}
		if got := scaled.Epsilons()[i]; math.Abs(got-want) > 1e-15*want {
			t.Errorf("λ=%v: Scale(%d) = %v, want %v", lam, k, got, want)
		}
	}
	if one.Epsilons()[0] != 1.1/2 {
		t.Error("Add or Scale modified its receiver")
	}
	// k = 0 composes nothing, even at +Inf orders.
	inf, _ := NewCurve([]float64{2, 3}, []float64{1, math.Inf(1)})
	z := inf.Scale(0)
	if z.Err() != nil || !slices.Equal(z.Epsilons(), []float64{0, 0}) {
		t.Errorf("Scale(0) = %v, %v", z.Epsilons(), z.Err())
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		if err := one.Scale(bad).Err(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Scale(%v): %v", bad, err)
		}
	}
	other := CurveOf(gaussCurve{1, 1}, append(DefaultOrders(), 2048))
	mis := one.Add(other)
	if err := mis.Err(); !errors.Is(err, ErrGridMismatch) {
		t.Errorf("Add on different grids: %v", err)
	}
	if err := mis.Add(one).Scale(2).Err(); !errors.Is(err, ErrGridMismatch) {
		t.Errorf("error not carried through Add and Scale: %v", err)
	}
	shifted := DefaultOrders()
	shifted[3] += 0.01
	if err := one.Add(CurveOf(gaussCurve{1, 1}, shifted)).Err(); !errors.Is(err, ErrGridMismatch) {
		t.Errorf("Add on shifted grid: %v", err)
	}
	if err := one.Add(Curve{}).Err(); !errors.Is(err, ErrEmptyCurve) {
		t.Errorf("Add empty: %v", err)
	}
	if err := (Curve{}).Scale(1).Err(); !errors.Is(err, ErrEmptyCurve) {
		t.Errorf("Scale empty: %v", err)
	}
}

func TestRegrid(t *testing.T) {
	c, _ := NewCurve([]float64{2, 4, 8}, []float64{1, 0.5, 3})
	r := c.Regrid([]float64{1.5, 2, 3, 4, 5, 8, 9})
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	// min over old orders ≥ new order; +Inf above 8.
	want := []float64{0.5, 0.5, 0.5, 0.5, 3, 3, math.Inf(1)}
	if !slices.Equal(r.Epsilons(), want) {
		t.Errorf("Regrid = %v, want %v", r.Epsilons(), want)
	}
	if err := c.Regrid(nil).Err(); !errors.Is(err, ErrEmptyCurve) {
		t.Errorf("Regrid(nil): %v", err)
	}
}
