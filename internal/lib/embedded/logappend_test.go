package embedded

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"hash/crc32"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// rawBatch is a fetched v2 batch's header as the broker sent it.
type rawBatch struct {
	attrs      int16
	first, max int64
	records    int32
	crcOK      bool
}

// fetchRaw fetches partition 0 of topic from offset 0 with Fetch version v
// and returns its batches' headers, checking each CRC itself.
func fetchRaw(t *testing.T, ctx context.Context, b *Broker, topic string, v int16) []rawBatch {
	t.Helper()
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(int16(kmsg.Fetch), v)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.MaxVersions(vs))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	info := b.Cluster().TopicInfo(topic)
	if info == nil {
		t.Fatalf("topic %s missing", topic)
	}
	req := kmsg.NewPtrFetchRequest()
	req.Version = v
	req.MaxWaitMillis = 10
	req.MaxBytes = 1 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, info.TopicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	broker := cl.Broker(0)
	if err := cl.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := broker.RetriableRequest(ctx, req)
	if err != nil {
		t.Fatalf("fetch v%d: %v", v, err)
	}
	fr := resp.(*kmsg.FetchResponse)
	if fr.Version != v {
		t.Fatalf("fetch answered as v%d, asked v%d", fr.Version, v)
	}
	var out []rawBatch
	for _, rt := range fr.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				t.Fatalf("fetch v%d %s: error code %d", v, topic, rp.ErrorCode)
			}
			for recs := rp.RecordBatches; len(recs) >= 61; {
				n := int(binary.BigEndian.Uint32(recs[8:])) + 12
				bb := recs[:n]
				recs = recs[n:]
				out = append(out, rawBatch{
					attrs:   int16(binary.BigEndian.Uint16(bb[21:])),
					first:   int64(binary.BigEndian.Uint64(bb[27:])),
					max:     int64(binary.BigEndian.Uint64(bb[35:])),
					records: int32(binary.BigEndian.Uint32(bb[57:])),
					crcOK:   binary.BigEndian.Uint32(bb[17:]) == crc32.Checksum(bb[21:], crc32.MakeTable(crc32.Castagnoli)),
				})
			}
		}
	}
	return out
}

// kgoRecords consumes partition 0 of topic from the start with kgo (which
// checks batch CRCs) until it has n records.
func kgoRecords(t *testing.T, ctx context.Context, addr, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("%s: %d of %d records: %v", topic, len(out), n, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("%s: fetch: %v", topic, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

// TestLogAppendTime: records produced to a LogAppendTime topic of the
// embedded broker — by kafka-go (the stage's input path), by kgo, and as a
// raw batch — come back to consumers as LogAppendTime batches (attribute
// 0x08) whose MaxTimestamp is the broker's append time, with a valid CRC, at
// every Fetch version (name- and topic-ID-addressed, flexible or not); a
// CreateTime topic keeps the producer's times; a producer that sets the
// attribute itself gets broker times with a valid CRC; a client cannot mark
// its own batches as broker-stamped. All of it survives Stop and Restart
// (kfake reloads its data directory, checking every CRC).
func TestLogAppendTime(t *testing.T) {
	b, err := Start(Config{
		Topics:       map[string]int{"lat": 1, "ct": 1, "ct-attr": 1, "ct-mark": 1},
		TopicConfigs: map[string]map[string]string{"ct": {timestampTypeKey: "CreateTime"}, "ct-attr": {timestampTypeKey: "CreateTime"}, "ct-mark": {timestampTypeKey: "CreateTime"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stamp := time.Now().Add(-time.Hour).Truncate(time.Millisecond)

	before := time.Now().UnixMilli()
	for _, topic := range []string{"lat", "ct"} {
		w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
		if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("kafka-go 1"), Time: stamp}, kafka.Message{Value: []byte("kafka-go 2"), Time: stamp.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
		w.Close()
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("kgo"), Timestamp: stamp}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cl.Close()
	}
	produceRaw(t, ctx, b, "ct-attr", stamp.UnixMilli(), attrLogAppendTime)
	produceRaw(t, ctx, b, "ct-mark", stamp.UnixMilli(), attrStamped)
	after := time.Now().UnixMilli()

	newest, _ := kversion.Stable().LookupMaxKeyVersion(int16(kmsg.Fetch))
	check := func(when string) {
		for _, tc := range []struct {
			topic            string
			batches, records int
			broker           bool
		}{{"lat", 2, 3, true}, {"ct", 2, 3, false}, {"ct-attr", 1, 1, true}, {"ct-mark", 1, 1, false}} {
			// 4: by name, not flexible; 12: flexible; 13 and the newest: by topic ID.
			for _, v := range []int16{4, 12, 13, newest} {
				got := fetchRaw(t, ctx, b, tc.topic, v)
				if len(got) != tc.batches {
					t.Fatalf("%s %s fetch v%d: %d batches, want %d", when, tc.topic, v, len(got), tc.batches)
				}
				for i, g := range got {
					if !g.crcOK {
						t.Errorf("%s %s fetch v%d batch %d: CRC invalid", when, tc.topic, v, i)
					}
					if g.attrs&attrStamped != 0 {
						t.Errorf("%s %s fetch v%d batch %d: attributes %#x carry the internal mark", when, tc.topic, v, i, g.attrs)
					}
					if lat := g.attrs&attrLogAppendTime != 0; lat != tc.broker {
						t.Errorf("%s %s fetch v%d batch %d: LogAppendTime attribute %v, want %v", when, tc.topic, v, i, lat, tc.broker)
					}
					if tc.broker && (g.max < before || g.max > after) {
						t.Errorf("%s %s fetch v%d batch %d: MaxTimestamp %d, want the append time in [%d, %d]", when, tc.topic, v, i, g.max, before, after)
					}
					if !tc.broker && g.first != stamp.UnixMilli() {
						t.Errorf("%s %s fetch v%d batch %d: FirstTimestamp %d, want the producer's %d", when, tc.topic, v, i, g.first, stamp.UnixMilli())
					}
				}
			}
			// kgo checks CRCs and reports the timestamp type per record.
			for i, r := range kgoRecords(t, ctx, b.Addr(), tc.topic, tc.records) {
				ms := r.Timestamp.UnixMilli()
				if tc.broker && (r.Attrs.TimestampType() != 1 || ms < before || ms > after) {
					t.Errorf("%s %s kgo record %d: type %d time %d, want LogAppendTime in [%d, %d]", when, tc.topic, i, r.Attrs.TimestampType(), ms, before, after)
				}
				if !tc.broker && (r.Attrs.TimestampType() != 0 || ms < stamp.UnixMilli() || ms > stamp.Add(time.Second).UnixMilli()) {
					t.Errorf("%s %s kgo record %d: type %d time %d, want CreateTime, the producer's", when, tc.topic, i, r.Attrs.TimestampType(), ms)
				}
			}
		}
	}
	check("before restart")
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	check("after restart")
}

// produceRaw produces one record in a hand-made v2 batch with the given
// extra batch attributes and first/max timestamp ts to partition 0.
func produceRaw(t *testing.T, ctx context.Context, b *Broker, topic string, ts int64, attrs int16) {
	t.Helper()
	rec := kmsg.Record{Value: []byte("raw")}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1) // the body after the (one-byte) length varint
	recs := rec.AppendTo(nil)
	batch := kmsg.RecordBatch{
		Magic: 2, Attributes: attrs, FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: recs,
	}
	raw := batch.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, b.Cluster().TopicInfo(topic).TopicID // v13+ go by ID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = raw
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != 0 {
		t.Fatalf("raw produce to %s: error code %d", topic, c)
	}
}

// TestLogAppendTimeTLS: with Config.TLS the broker accepts TLS only and
// still answers fetches with LogAppendTime batches (the rewriting sits above
// the TLS the broker's listener terminates).
func TestLogAppendTimeTLS(t *testing.T) {
	serverCfg, pool := testCert(t)
	b, err := Start(Config{Topics: map[string]int{"lat": 1}, TLS: serverCfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Plaintext is refused: kafka-go cannot produce.
	plain := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "lat", MaxAttempts: 1, Transport: &kafka.Transport{DialTimeout: time.Second}}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	if err := plain.WriteMessages(pctx, kafka.Message{Value: []byte("x")}); err == nil {
		t.Error("plaintext produce to a TLS broker succeeded")
	}
	pcancel()
	plain.Close()

	clientTLS := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "lat", RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		Transport: &kafka.Transport{TLS: clientTLS}}
	before := time.Now().UnixMilli()
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("x"), Time: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	after := time.Now().UnixMilli()
	recs := kgoRecords(t, ctx, b.Addr(), "lat", 1, kgo.DialTLSConfig(clientTLS))
	if r := recs[0]; r.Attrs.TimestampType() != 1 || r.Timestamp.UnixMilli() < before || r.Timestamp.UnixMilli() > after {
		t.Errorf("over TLS: type %d time %d, want LogAppendTime in [%d, %d]", r.Attrs.TimestampType(), r.Timestamp.UnixMilli(), before, after)
	}
}

// testCert returns a server config with a fresh self-signed certificate for
// localhost and 127.0.0.1, and a pool trusting it.
func testCert(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, pool
}

// TestStampBatch: the produce-side rewrite. A batch the broker stamps leaves
// it without the LogAppendTime attribute (kfake would otherwise restamp it
// with its own clock and keep a stale CRC, at a millisecond's chance) and
// with the mark, the broker's time and a valid CRC; the fetch-side rewrite
// turns the mark into the attribute. Anything else passes unchanged.
func TestStampBatch(t *testing.T) {
	const ts, now = int64(1000), int64(5000)
	mk := func(attrs int16) []byte {
		rec := kmsg.Record{Value: []byte("v")}
		rec.Length = int32(len(rec.AppendTo(nil)) - 1)
		b := kmsg.RecordBatch{Magic: 2, Attributes: attrs, FirstTimestamp: ts, MaxTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: rec.AppendTo(nil)}
		raw := b.AppendTo(nil)
		binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
		setCRC(raw)
		return raw
	}
	badCRC := mk(0)
	badCRC[len(badCRC)-1] ^= 1
	for _, tc := range []struct {
		name      string
		in        []byte
		logAppend bool
		attrs     int16 // after stampBatch
		stamped   bool
	}{
		{"LogAppendTime topic", mk(1), true, 1 | attrStamped, true},
		{"producer asks for LogAppendTime", mk(attrLogAppendTime), false, attrStamped, true},
		{"both", mk(attrLogAppendTime | 2), true, 2 | attrStamped, true},
		{"CreateTime topic", mk(0), false, 0, false},
		{"client-set mark cleared", mk(attrStamped | 1), false, 1, false},
		{"bad CRC left to kfake", badCRC, true, 0, false},
	} {
		out := stampBatch(tc.in, tc.logAppend, now)
		attrs := int16(binary.BigEndian.Uint16(out[batchAttrs:]))
		first, maxTs := int64(binary.BigEndian.Uint64(out[batchFirstTs:])), int64(binary.BigEndian.Uint64(out[batchMaxTs:]))
		crcOK := binary.BigEndian.Uint32(out[batchCRC:]) == crc32.Checksum(out[batchAttrs:], crc32c)
		if attrs != tc.attrs || crcOK == (tc.name == "bad CRC left to kfake") {
			t.Errorf("%s: attributes %#x CRC ok %v, want %#x", tc.name, attrs, crcOK, tc.attrs)
		}
		if want := map[bool]int64{true: now, false: ts}[tc.stamped]; first != want || maxTs != want {
			t.Errorf("%s: timestamps %d, %d, want %d", tc.name, first, maxTs, want)
		}
		// Fetch side, two copies in one response plus a partial third.
		resp := append(append(append([]byte(nil), out...), out...), out[:len(out)-3]...)
		changed := unstampBatches(resp)
		if changed != tc.stamped {
			t.Errorf("%s: unstamp changed %v, want %v", tc.name, changed, tc.stamped)
		}
		for i := range 2 {
			b := resp[i*len(out) : (i+1)*len(out)]
			a := int16(binary.BigEndian.Uint16(b[batchAttrs:]))
			if want := tc.attrs &^ attrStamped; tc.stamped && a != want|attrLogAppendTime || !tc.stamped && a != want {
				t.Errorf("%s: fetched copy %d: attributes %#x", tc.name, i, a)
			}
			if ok := binary.BigEndian.Uint32(b[batchCRC:]) == crc32.Checksum(b[batchAttrs:], crc32c); ok != crcOK {
				t.Errorf("%s: fetched copy %d: CRC ok %v", tc.name, i, ok)
			}
		}
		if string(resp[2*len(out):]) != string(out[:len(out)-3]) {
			t.Errorf("%s: the partial batch was changed", tc.name)
		}
	}
}

// TestTLSInExtraLogged: kfake.TLS passed in Extra puts TLS below the
// LogAppendTime rewriting, which then cannot see the fetches: the broker
// says so in an error log instead of silently serving CreateTime-looking
// batches.
func TestTLSInExtraLogged(t *testing.T) {
	serverCfg, pool := testCert(t)
	core, logs := observer.New(zap.ErrorLevel)
	b, err := Start(Config{Topics: map[string]int{"lat": 1}, Extra: []kfake.Opt{kfake.TLS(serverCfg)}, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DialTLSConfig(&tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessageSnippet("embedded.Config.TLS").Len(); n != 1 {
		t.Errorf("%d error logs about TLS in Extra, want 1", n)
	}
}
