package cli

import (
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/embedded"
)

// TestBrokerUsage: stage broker refuses to start without topics, with a
// malformed --topics and with stray arguments (exit 2, a message saying
// what to give).
func TestBrokerUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no topics"},
		{[]string{"--topics", "a:0"}, "partitions at least 1"},
		{[]string{"--topics", "a"}, "name:partitions"},
		{[]string{"--topics", "a:1", "extra"}, "unexpected arguments"},
		{[]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, "missing.yaml"},
	} {
		var stderr syncBuffer
		if code := runBroker(context.Background(), tc.args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestBroker: stage broker --config creates the config's input (its
// kafka.input_partitions), output and extra topics, LogAppendTime, prints
// its address, serves until its context ends and exits 0; a second start on
// the same data directory has the topics and records of the first.
func TestBroker(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "stage-distributed.yaml")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := func() (string, func() int) {
		bctx, stop := context.WithCancel(ctx)
		var stdout, stderr syncBuffer
		code := make(chan int, 1)
		go func() {
			code <- runBroker(bctx, []string{"--config", path, "--port", "0", "--data-dir", dir, "--topics", "extra:2"}, &stdout, &stderr)
		}()
		re := regexp.MustCompile(`broker at (127\.0\.0\.1:\d+)`)
		for {
			if m := re.FindStringSubmatch(stdout.String()); m != nil {
				return m[1], func() int { stop(); return <-code }
			}
			select {
			case c := <-code:
				t.Fatalf("stage broker exited %d: %s", c, stderr.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	addr, stop := start()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("extra"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if code := stop(); code != 0 {
		t.Fatalf("exit %d after the context ended, want 0", code)
	}

	addr, stop = start()
	defer stop()
	cl, err = kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	want := map[string]int{cfg.Kafka.InputTopic: cfg.Kafka.InputPartitions, cfg.Kafka.OutputTopic: 1, "extra": 2}
	td, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for topic, n := range want {
		if got := len(td[topic].Partitions); got != n {
			t.Errorf("topic %s: %d partitions, want %d", topic, got, n)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, cfg.Kafka.InputTopic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(cfg.Kafka.InputTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	tt := ""
	for _, c := range rc.Configs {
		if c.Key == "message.timestamp.type" && c.Value != nil {
			tt = *c.Value
		}
	}
	if tt != "LogAppendTime" {
		t.Errorf("input topic message.timestamp.type %q, want LogAppendTime", tt)
	}
	offs, err := adm.ListEndOffsets(ctx, "extra")
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	offs.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 1 {
		t.Errorf("after the restart on the data directory, extra holds %d records, want 1", total)
	}
}

// TestBrokerDataDirInUse (issue 28 item 6): stage broker on a data
// directory another broker holds exits 1 saying so — not with a guess at a
// taken port — and starts nothing on it.
func TestBrokerDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	first, err := embedded.Start(embedded.Config{DataDir: dir, Topics: map[string]int{"a": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	var stdout, stderr syncBuffer
	code := runBroker(context.Background(), []string{"--port", "0", "--data-dir", dir, "--topics", "a:1"}, &stdout, &stderr)
	t.Logf("exit %d: %s", code, stderr.String())
	if code != 1 || !strings.Contains(stderr.String(), "in use by another broker") || strings.Contains(stderr.String(), "taken?") || stdout.String() != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and the data directory in use", code, stdout.String(), stderr.String())
	}
}
