package kafkalog

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/release"
)

// bigUnit is a released unit of histogram h for window w with one release
// message per group, as the releaser publishes them (release.Release JSON,
// a Dirichlet release of bins bins).
func bigUnit(h string, w int64, groups, bins int) *ledger.Unit {
	u := released(h, w, 0.1, "")
	u.Messages = u.Messages[:0]
	names := make([]string, bins)
	probs := make([]float64, bins)
	for i := range bins {
		names[i] = fmt.Sprintf("bin-%02d", i)
		probs[i] = float64(1+i*37%bins) / 1e4
	}
	for g := range groups {
		group := fmt.Sprintf("group-%05d", g)
		v, err := json.Marshal(release.Release{
			ReleaseID: release.ReleaseID(h, group, w), Histogram: h, Group: group,
			WindowStart: release.RFC3339(w), WindowEnd: release.RFC3339(w + minute), Bins: names, Probabilities: probs,
			Mechanism: "dirichlet", Calibration: "optimal",
			Params: release.Params{Alpha: 123.456789012345, R: 0.0001},
			Privacy: release.Privacy{Order: 2, RDPEpsilon: 1.6875e-05, ChargeID: release.ReleaseID(h, "", w), ChargeRDPEpsilon: 1.6875e-05,
				SpentEpsilon: 0.98765432101234, BudgetEpsilon: 1},
		})
		if err != nil {
			panic(err)
		}
		u.Messages = append(u.Messages, ledger.Message{Key: []byte(group), Value: v})
	}
	return u
}

// TestLargestUnitRecorded (issue 22 item 2): the unit of a window of the
// largest histogram kafka.distributed accepts (config.MaxDistributedCells:
// groups × (bins + 1) ≤ 35,000, so 11,666 groups of 2 bins, the most
// messages, or 3,181 of 10 bins, which the review measured at 3.6 MB) is
// recorded, marked published, restored by a new owner with every message,
// kept whole by compaction, and pruned with all its records. Before, its one
// record exceeded Kafka's 1 MB limit and the window failed with
// MESSAGE_TOO_LARGE, in both modes that use the Kafka log.
func TestLargestUnitRecorded(t *testing.T) {
	for _, tc := range []struct{ groups, bins int }{
		{config.MaxDistributedCells / 3, 2},
		{config.MaxDistributedCells / 11, 10},
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.groups, tc.bins), func(t *testing.T) {
			c := newCluster(t)
			l := openLog(t, c)
			big := bigUnit("pages", 0, tc.groups, tc.bins)
			whole, err := json.Marshal(big)
			must(t, err)
			must(t, l.RecordWindow(ctxT(t), []*ledger.Unit{big, released("devices", 0, 0.1, "small")}, curve(0.2, 1)))
			must(t, l.MarkPublishedKeys(ctxT(t), [][]byte{big.Key(), ledger.UnitKey("devices", 0)}))
			// Two more windows: the publication is not in the last batch,
			// which the broker never compacts; window 2 stays unpruned.
			for w := int64(1); w <= 2; w++ {
				must(t, l.RecordWindow(ctxT(t), []*ledger.Unit{released("pages", w*minute, 0.1, "next")}, curve(0.2+0.1*float64(w), 1)))
				must(t, l.MarkPublished(ctxT(t), "pages", w*minute))
			}
			want := dump(t, l, 0)
			must(t, l.Close())
			recs := readRaw(t, c, true)
			maxLen, parts := 0, 0
			for _, r := range recs {
				maxLen = max(maxLen, len(r.Value))
				if strings.HasPrefix(string(r.Key), prefixUnitPart) {
					parts++
				}
			}
			t.Logf("%d groups × %d bins: unit JSON %d B, written as %d parts; largest record value %d B", tc.groups, tc.bins, len(whole), parts, maxLen)
			if maxLen > unitPartBytes {
				t.Errorf("a record of %d B, above %d", maxLen, unitPartBytes)
			}

			c.Compact()
			l = openLog(t, c)
			if got := dump(t, l, 0); got != want {
				t.Fatal("restored after compaction: not the state written")
			}
			u, ok, err := l.Lookup("pages", 0)
			must(t, err)
			if !ok || !u.Published || len(u.Messages) != tc.groups || string(u.Messages[tc.groups-1].Value) != string(big.Messages[tc.groups-1].Value) {
				t.Fatalf("restored unit: ok=%v published=%v, %d messages", ok, u != nil && u.Published, len(u.Messages))
			}

			n, _, err := l.Prune(ctxT(t), 2*minute)
			must(t, err)
			if n != 3 || len(l.st.parts) != 0 || len(l.st.split) != 0 {
				t.Fatalf("pruned %d units, %d split units left in memory", n, len(l.st.split))
			}
			must(t, l.Close())
			l = openLog(t, c)
			if _, ok, _ := l.Lookup("pages", 0); ok || len(l.st.parts) != 0 {
				t.Fatalf("after prune and reopen: unit there %v, %d parts", ok, len(l.st.parts))
			}
		})
	}
}
