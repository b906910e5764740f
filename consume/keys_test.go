package consume

import (
	"fmt"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
)

// TestBoundaryKeys (issue 30): a histogram with group_by and no groups is
// counted per key (AggregateSpec sets Selects), and the Boundary hands its
// keys to the releaser by config index — also when it is counted by the
// window set of another size than config index 0's — while a listed
// histogram has none. Events go through the real decoder.
func TestBoundaryKeys(t *testing.T) {
	cfg := &config.Config{
		Events: config.Events{Format: "json", TimeField: "ts", UserField: "u"},
		Window: config.Window{Size: config.Duration(time.Minute)},
		Histograms: []config.Histogram{
			{Name: "devices", Field: "device", Bins: []string{"mobile", "desktop"}},
			{Name: "pages", Field: "device", Bins: []string{"mobile", "desktop"}, GroupBy: "page"},
		},
		Contribution: config.Contribution{MaxEventsPerUser: 2, MaxGroupsPerUser: 2},
	}
	spec := AggregateSpec(cfg)
	if spec.Histograms[0].Selects || !spec.Histograms[1].Selects || len(spec.Histograms[1].Groups) != 0 {
		t.Fatalf("spec %+v", spec.Histograms)
	}
	sets, err := NewWindowSets(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := decode.New(cfg, siphash.MustNewKey())
	if err != nil {
		t.Fatal(err)
	}
	ev := d.NewEvent()
	sess := &Session{Sets: sets}
	for _, m := range []string{
		`{"ts":1000,"u":"a","device":"mobile","page":"home"}`,
		`{"ts":2000,"u":"b","device":"desktop","page":"home"}`,
		`{"ts":3000,"u":"b","device":"mobile","page":"cart"}`,
		`{"ts":4000,"u":"c","device":"mobile"}`, // no page: devices only
	} {
		if r := d.Decode([]byte(m), ev); r != decode.ReasonNone {
			t.Fatalf("%s: %v", m, r)
		}
		sess.add(0, 60_000, 0, ev)
	}
	b, err := sess.closeBoundary(60_000, func(*WindowSet) func(uint64) bool { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if b.Keys(0) != 0 {
		t.Errorf("listed histogram: %d keys", b.Keys(0))
	}
	var got []string
	for i := range b.Keys(1) {
		k, u, c := b.Key(1, i, nil)
		got = append(got, fmt.Sprintf("%s:%d:%v", k, u, c))
	}
	if want := "[cart:1:[1 0] home:2:[1 1]]"; fmt.Sprint(got) != want {
		t.Errorf("keys %v, want %s", got, want)
	}
	if c := b.Counts(0, 0, nil); fmt.Sprint(c) != "[3 1]" {
		t.Errorf("devices %v", c)
	}
}
