package distributed

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/ledger/kafkalog"
)

// TestDistReleaserPrunesWhileLeading (issue 22 item 2): state.retain 2m,
// 1-minute windows, 5-minute budget periods. One releaser leads over 12
// windows (two periods and a bit): while it leads, the published units
// more than state.retain behind the last window, and the spend of the
// period that ended before them, leave its log's memory and are tombstoned
// in the topic, so a takeover restores only what is retained. Before, the
// log was pruned only when a releaser attached it.
func TestDistReleaserPrunesWhileLeading(t *testing.T) {
	e := newDistEnv(t, 1)
	e.cfg.State.Retain = config.Duration(2 * distWindow)
	e.cfg.Privacy.Budget.Period = config.Duration(5 * distWindow)
	r := e.start(t)
	tr := truth{}
	const windows = 12
	for w := range windows {
		e.emit(t, tr, w, 0)
	}
	e.readOut(t, windows*unitsPerWindow, 30*time.Second, 0)
	last := distBase.Add((windows - 1) * distWindow).UnixMilli()
	before := last - 2*distWindow.Milliseconds()
	period0 := distBase.UnixMilli()
	var units []*ledger.Unit
	var spent0 bool
	waitFor(t, "the units behind state.retain pruned while leading", 10*time.Second, func() bool {
		units = units[:0]
		_ = r.s.Ledger.Units(func(u *ledger.Unit) bool { units = append(units, u); return true })
		_, spent0, _ = r.s.Ledger.Spent(period0)
		return len(units) > 0 && units[0].WindowStart >= before && !spent0
	})
	if got, want := len(units), 3*len(distHists); got != want {
		t.Errorf("%d units left, want %d (windows 9 to 11)", got, want)
	}

	// The topic holds the tombstones: a new owner restores the same.
	led, err := kafkalog.Open(context.Background(), kafkalog.Config{Brokers: e.b.Addrs(), Topic: e.cfg.State.LedgerTopic,
		TransactionalID: "prune-test-reader", ClientOpts: []kgo.Opt{}})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	n := 0
	if err := led.Units(func(u *ledger.Unit) bool {
		n++
		if u.WindowStart < before {
			t.Errorf("restored a unit of %d, behind %d", u.WindowStart, before)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := led.Spent(period0); ok || n != 3*len(distHists) {
		t.Errorf("restored %d units, period 0's spend there: %v", n, ok)
	}
	if err := r.stop(t); err != nil && !strings.Contains(err.Error(), "context canceled") {
		t.Fatal(err)
	}
}
