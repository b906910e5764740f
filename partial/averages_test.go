package partial

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

// TestPartialAveragesRoundTrip: a Partial's average cells (kept users'
// hashes, full 64 bits, and vectors) decode exactly; an older Partial has
// none; malformed cells are refused.
func TestPartialAveragesRoundTrip(t *testing.T) {
	p := &Partial{WindowStart: 60000, WindowMs: 60000, Partition: 1, Partitions: 2, Next: 120000,
		Averages: []AverageCell{{H: 1, Users: []uint64{3, math.MaxUint64 - 1}, Vectors: [][]float64{{0.25, 0.75}, {1.0 / 3, 2.0 / 3}}}}}
	got, err := DecodePartial(p.Encode())
	if err != nil {
		t.Fatal(err)
	}
	want := *p
	want.V = Version
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("round trip: got %+v, want %+v", *got, want)
	}
	old := `{"v":1,"window_start":10,"window_ms":10,"partition":1,"partitions":2,"next":20,"watermark":0,"config":""}`
	if got, err = DecodePartial([]byte(old)); err != nil || got.Averages != nil {
		t.Fatalf("older partial: %+v, %v", got, err)
	}
	for name, v := range map[string]string{
		"users without vectors": `{"v":1,"window_start":0,"window_ms":1,"partition":0,"partitions":1,"next":1,"averages":[{"h":0,"users":[1],"vectors":[]}]}`,
		"unsorted users":        `{"v":1,"window_start":0,"window_ms":1,"partition":0,"partitions":1,"next":1,"averages":[{"h":0,"users":[2,1],"vectors":[[1,0],[0,1]]}]}`,
		"histogram twice":       `{"v":1,"window_start":0,"window_ms":1,"partition":0,"partitions":1,"next":1,"averages":[{"h":0,"users":[],"vectors":[]},{"h":0,"users":[],"vectors":[]}]}`,
		"negative histogram":    `{"v":1,"window_start":0,"window_ms":1,"partition":0,"partitions":1,"next":1,"averages":[{"h":-1,"users":[],"vectors":[]}]}`,
	} {
		if _, err := DecodePartial([]byte(v)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: DecodePartial = %v, want ErrFormat", name, err)
		}
	}
}

// TestPartialAveragesFitOneRecord: at the validation's limit (average.users
// × (bins + 1) = 35,000 cells, config.MaxDistributedCells) a Partial with
// every kept user, 20-digit hashes and 22-character numbers, stays under
// Kafka's default 1 MB record limit, for the fewest bins (2, the most
// users) and more.
func TestPartialAveragesFitOneRecord(t *testing.T) {
	const limit = 35000 // config.MaxDistributedCells (partial does not import config)
	for _, bins := range []int{2, 5, 20} {
		users := limit / (bins + 1)
		a := AverageCell{H: 0}
		for i := range users {
			a.Users = append(a.Users, math.MaxUint64-uint64(users-i))
			v := make([]float64, bins)
			for j := range v {
				v[j] = 1.2345678901234567e-05
			}
			a.Vectors = append(a.Vectors, v)
		}
		p := &Partial{WindowStart: 1 << 40, WindowMs: 60000, Partition: 99, Partitions: 100, Next: 1<<40 + 60000, Averages: []AverageCell{a}}
		if n := len(p.Encode()); n >= 1_000_000 {
			t.Errorf("%d bins, %d users: %d bytes, over 1 MB", bins, users, n)
		} else {
			t.Logf("%d bins, %d users: %d bytes", bins, users, n)
		}
	}
}
