package aggregate_test

import (
	"fmt"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
)

func Example() {
	cfg := &config.Config{
		Events: config.Events{TimeField: "ts", UserField: "user_id"},
		Window: config.Window{Size: config.Duration(time.Minute)},
		Histograms: []config.Histogram{{Name: "pages", Field: "page", Bins: []string{"home", "cart", "other"},
			OverflowBin: "other", GroupBy: "country", Groups: []string{"US", "DE"}}},
		Contribution: config.Contribution{MaxEventsPerUser: 1, MaxGroupsPerUser: 1, MaxTrackedUsers: 1000},
	}
	d, err := decode.New(cfg, siphash.MustNewKey())
	if err != nil {
		panic(err)
	}
	// The stage builds the Spec from the config in one place
	// (consume.AggregateSpec); here it is written out.
	a, err := aggregate.New(aggregate.Spec{MaxEventsPerUser: 1, MaxGroupsPerUser: 1, MaxTrackedUsers: 1000, WindowSize: time.Minute,
		Histograms: []aggregate.HistSpec{{Name: "pages", Bins: []string{"home", "cart", "other"}, Groups: []string{"US", "DE"}}}})
	if err != nil {
		panic(err)
	}
	ev := d.NewEvent()
	var total aggregate.Outcome
	for _, msg := range []string{
		`{"ts":1700000040000,"user_id":"alice","page":"home","country":"US"}`,
		`{"ts":1700000040000,"user_id":"alice","page":"home","country":"US"}`,  // the same again: over alice's bound
		`{"ts":1700000042000,"user_id":"bob","page":"pricing","country":"US"}`, // overflow bin
		`{"ts":1700000043000,"user_id":"carol","page":"cart","country":"DE"}`,
		`{"ts":1700000044000,"user_id":"dave","page":"cart","country":"JP"}`, // undeclared group
	} {
		if r := d.Decode([]byte(msg), ev); r != decode.ReasonNone {
			fmt.Println("dropped:", r)
			continue
		}
		if ev.Drops[0] != decode.ReasonNone {
			fmt.Println("dropped part:", ev.Drops[0])
			continue
		}
		total.Add(a.Add(ev.TimeMs-ev.TimeMs%60000, ev))
	}
	fmt.Printf("%+v\n", total)

	wc, err := a.Close(1700000040000)
	if err != nil {
		panic(err)
	}
	defer wc.Release()
	for g, group := range []string{"US", "DE"} {
		fmt.Println(group, wc.Counts(0, g, nil))
	}
	fmt.Println(wc.Record().NumRows(), "rows")
	// Output:
	// dropped part: unknown_group
	// {Counted:3 DroppedUserEvents:1 DroppedUserGroups:0 DroppedCapacity:0 Displaced:0}
	// US [1 0 1]
	// DE [0 1 0]
	// 6 rows
}
