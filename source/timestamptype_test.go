package source

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/lib/embedded"
)

// TestEmbeddedTimestampType: the embedded broker creates its topics with
// message.timestamp.type=LogAppendTime (unless told CreateTime), reports it
// through DescribeConfigs (TimestampType), and appends LogAppendTime
// batches: the fetcher sees broker-set times (BrokerTime) equal to the
// append time, not the producer's stamp. A CreateTime topic keeps the
// producer's time. Broker-stamped batches survive the broker's restart
// (their CRC is the stamped batch's).
func TestEmbeddedTimestampType(t *testing.T) {
	b, err := embedded.Start(embedded.Config{
		Topics:       map[string]int{"lat": 1, "ct": 1},
		TopicConfigs: map[string]map[string]string{"ct": {"message.timestamp.type": TimestampCreateTime}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTopic("later", 1); err != nil {
		t.Fatal(err)
	}
	stamp := time.Now().Add(-time.Hour).Truncate(time.Millisecond) // the producer's (CreateTime) stamp
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		topic, want string
	}{{"lat", TimestampLogAppendTime}, {"later", TimestampLogAppendTime}, {"ct", TimestampCreateTime}} {
		got, err := TimestampType(ctx, b.Addrs(), nil, tc.topic)
		if err != nil || got != tc.want {
			t.Errorf("%s: TimestampType = %q, %v; want %q", tc.topic, got, err, tc.want)
		}
		w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Transport: &kafka.Transport{}, Topic: tc.topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
		before := time.Now().Truncate(time.Millisecond)
		if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("x"), Time: stamp}, kafka.Message{Value: []byte("y"), Time: stamp}); err != nil {
			t.Fatal(err)
		}
		w.Close()
		f := NewFetcher(nil, b.Addrs(), tc.topic, 0, kafka.FirstOffset)
		for i := range 2 {
			m, err := f.Fetch(ctx)
			if err != nil {
				t.Fatalf("%s: fetch %d: %v", tc.topic, i, err)
			}
			broker := tc.want == TimestampLogAppendTime
			if f.BrokerTime() != broker {
				t.Errorf("%s: record %d: BrokerTime = %v, want %v", tc.topic, i, f.BrokerTime(), broker)
			}
			if broker && (m.Time.Before(before) || m.Time.After(time.Now())) {
				t.Errorf("%s: record %d: time %v, want the append time (after %v)", tc.topic, i, m.Time, before)
			}
			if !broker && !m.Time.Equal(stamp) {
				t.Errorf("%s: record %d: time %v, want the producer's %v", tc.topic, i, m.Time, stamp)
			}
		}
		f.Close()
	}
	// The broker's restart reloads the batches from its data directory,
	// checking their CRCs: the broker-stamped batches must pass.
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	f := NewFetcher(nil, b.Addrs(), "lat", 0, kafka.FirstOffset)
	defer f.Close()
	if m, err := f.Fetch(ctx); err != nil || !f.BrokerTime() || m.Time.Equal(stamp) {
		t.Errorf("after a restart: %v, %v, BrokerTime %v; want the broker's time", m.Time, err, f.BrokerTime())
	}
	if _, err := TimestampType(ctx, b.Addrs(), nil, "missing"); err == nil {
		t.Error("TimestampType of a missing topic: no error")
	}
}
