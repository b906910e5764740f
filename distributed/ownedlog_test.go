package distributed

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dpstage/stage/node"
)

// TestRevokedLogsOwnedSet: a revocation's log line names the partitions
// revoked and the set the bounder still owns (issue 31: an operator reading
// one line knows the member's whole assignment, not only the change).
func TestRevokedLogsOwnedSet(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	done := func() chan struct{} { c := make(chan struct{}); close(c); return c }
	b := &bounder{
		s:   &stage{Node: &node.Node{Log: zap.New(core)}},
		ctx: context.Background(),
		workers: map[int32]*workerHandle{
			5: {cancel: func() {}, done: done()},
			1: {cancel: func() {}, done: done()},
			3: {cancel: func() {}, done: done()},
		},
		offs: map[int32]int64{},
	}
	b.revoked([]int32{3})
	entries := logs.FilterMessage("bounder revoked partitions").All()
	if len(entries) != 1 {
		t.Fatalf("%d revocation lines, want 1: %v", len(entries), logs.All())
	}
	f := entries[0].ContextMap()
	if got := f["partitions"]; !slices.Equal(toInt32s(got), []int32{3}) {
		t.Errorf("partitions = %v, want [3]", got)
	}
	if got := f["owned"]; !slices.Equal(toInt32s(got), []int32{1, 5}) {
		t.Errorf("owned = %v, want [1 5]", got)
	}
}

func toInt32s(v any) []int32 {
	switch x := v.(type) {
	case []int32:
		return x
	case []any:
		out := make([]int32, 0, len(x))
		for _, e := range x {
			out = append(out, e.(int32))
		}
		return out
	}
	return nil
}

// TestReleaserStopLog: a releaser asked to stop (SIGTERM) says it is
// leaving the release group, not that the partials topic "was taken from
// this instance" (issue 31: that line read as a failure on every normal
// stop).
func TestReleaserStopLog(t *testing.T) {
	e := newDistEnv(t, 2)
	core, logs := observer.New(zap.InfoLevel)
	r := e.startWith(t, func(s *stage) { s.Log = zap.New(core) })
	tr := truth{}
	for p := range e.n {
		e.emit(t, tr, 0, p)
	}
	e.readOut(t, unitsPerWindow, 30*time.Second, 0) // leading: it released window 0
	if err := r.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := logs.FilterMessageSnippet("taken from this instance").Len(); n != 0 {
		t.Errorf("a requested stop logged %d lines saying the partials topic was taken", n)
	}
	if n := logs.FilterMessageSnippet("releaser: stopping").Len(); n != 1 {
		t.Errorf("%d stop lines, want 1", n)
	}
}
