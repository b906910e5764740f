package main

import (
	"flag"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/e2e"
)

var distStormKills = flag.Int("dist-storm-kills", 0, "distributed kill storm: SIGKILLs rotating over 3 processes before all are stopped with SIGTERM (0: skipped)")

// TestDistStopAfterKillStorm (issue 22 item 2, "SIGTERM ignored after a
// kill storm"; run with -dist-storm-kills N): 3 distributed processes
// with 10 s sessions (the default) on 3 brokers and 12 input partitions;
// N SIGKILLs rotate over them, each slot started again at once on an
// empty state.dir, 0.3–1.5 s apart, so that the groups are still waiting
// out killed members' sessions — JoinGroups in flight — when every
// process gets SIGTERM. Each must exit 0 within the drain timeout (30 s);
// the test logs how long each took. Before, a standby of the release
// group waited in kgo's Close for its JoinGroup (over 15 s, 3 runs of 3
// in the review).
func TestDistStopAfterKillStorm(t *testing.T) {
	if *distStormKills <= 0 {
		t.Skip("kill storm: run with -dist-storm-kills N")
	}
	const drain = 30 * time.Second // the stage's DrainTimeout
	name := "dist-storm"
	input, output := "events-"+name, "out-"+name
	c := e2e.StartDistCluster(t, 3, map[string]int{input: distPartitions, output: 1})
	d := &distDeployment{t: t, c: c, dir: t.TempDir(), name: name,
		edit: func(y string) string { return strings.Replace(y, "session_timeout: 1s", "session_timeout: 10s", 1) }}
	group := "g-" + name
	for i := range distProcs {
		d.start(i)
	}
	t.Cleanup(d.killAll)
	e2e.WaitFor(t, "3 bounders with input partitions and a releaser", 60*time.Second, func() bool {
		d.mustRun()
		return len(e2e.MembersWith(c.Cluster, group, input)) == distProcs && e2e.MemberOf(c.Cluster, group+".release", group+".partials", 0) != ""
	})
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 22))
	for k := range *distStormKills {
		i := k % distProcs
		p := d.procs[i]
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		d.start(i)
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
	}
	start := time.Now()
	for _, p := range d.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	var worst time.Duration
	for i, p := range d.procs {
		select {
		case <-p.done:
		case <-time.After(drain + 5*time.Second - time.Since(start)):
			t.Errorf("process %d still running %v after SIGTERM:\n%s", i, time.Since(start).Round(time.Millisecond), e2e.Tail(p.out.String(), 3000))
			continue
		}
		took := time.Since(start)
		worst = max(worst, took)
		t.Logf("process %d exited %v after SIGTERM (%v)", i, took.Round(time.Millisecond), p.err)
		if p.err != nil {
			t.Errorf("process %d: %v\n%s", i, p.err, e2e.Tail(p.out.String(), 3000))
		}
	}
	t.Logf("after %d SIGKILLs: every process exited within %v of SIGTERM (drain timeout %v)", *distStormKills, worst.Round(time.Millisecond), drain)
	if worst > drain {
		t.Errorf("slowest exit %v, above the drain timeout %v", worst, drain)
	}
}
