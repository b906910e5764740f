package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/internal/lib/embedded"
)

// syncBuffer collects log output from several goroutines.
type syncBuffer = e2e.SyncBuffer

const secureYAML = `kafka:
  brokers: [%q]
  group_id: sec
  input_topic: events
  output_topic: out
  session_timeout: 1s
%s
events: {time_field: ts, user_field: user_id}
window: {size: 1m, watermark: event, allowed_lateness: 0s, idle_partition_timeout: 300ms, start: "2026-05-01T00:00:00Z"}
histograms:
  - {name: pages, field: page, bins: [home, other], overflow_bin: other}
privacy:
  budget: {epsilon: 5, delta: 1.0e-6, period: 1h}
state: {dir: %q}
log: {level: debug}
http: {address: "127.0.0.1:0", operator_address: "127.0.0.1:0"} # any free ports: the defaults 8080, 8081 may be taken
`

// runSecured runs the stage with cfgText until a release appears on the
// output topic (when expectRelease) or for a few seconds, capturing every log
// line at debug level and stdout.
func runSecured(t *testing.T, cfgText string, addr string, dialer *kafka.Dialer, transport *kafka.Transport, expectRelease bool) (logs string, runErr error) {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgText), func(k string) (string, bool) { return os.LookupEnv(k) })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	var buf syncBuffer
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zapcore.DebugLevel)
	log := zap.New(core)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stdout syncBuffer
	go func() { done <- runStage(ctx, cfg, log, &stdout, true) }()

	if expectRelease {
		w := &kafka.Writer{Addr: kafka.TCP(addr), Topic: "events", Balancer: &kafka.Hash{}, Transport: transport, BatchTimeout: time.Millisecond}
		base := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		err := w.WriteMessages(wctx,
			kafka.Message{Key: []byte("a"), Value: []byte(fmt.Sprintf(`{"ts":%d,"user_id":"a","page":"home"}`, base))},
			kafka.Message{Key: []byte("a"), Value: []byte(fmt.Sprintf(`{"ts":%d,"user_id":"a","page":"home"}`, base+61000))})
		wcancel()
		w.Close()
		if err != nil {
			cancel()
			t.Fatalf("produce over the secured connection: %v", err)
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: "out", Partition: 0, Dialer: dialer, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 500 * time.Millisecond})
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = r.ReadMessage(rctx)
		rcancel()
		r.Close()
		if err != nil {
			cancel()
			t.Fatalf("no release over the secured connection: %v\nlogs:\n%s", err, buf.String())
		}
	} else {
		time.Sleep(4 * time.Second)
	}
	cancel()
	select {
	case runErr = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("stage did not stop")
	}
	return buf.String() + stdout.String(), runErr
}

// TestSASLSecretsNeverLogged: the stage authenticates with SCRAM-SHA-256 to a
// SASL-only broker, with the password from ${ENV}; with the right password it
// releases, with a wrong one it retries loudly; in neither case does the
// password appear in any log line (debug level), error or output.
func TestSASLSecretsNeverLogged(t *testing.T) {
	const good, bad = "g00d-Pa55w0rd-7f3a", "wr0ng-Pa55w0rd-c91e"
	b, err := embedded.Start(embedded.Config{
		Topics: map[string]int{"events": 2, "out": 1},
		Extra:  []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "stage", good)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sasl := "  sasl:\n    mechanism: scram-sha-256\n    username: stage\n    password: ${STAGE_TEST_KAFKA_PASSWORD}"

	t.Setenv("STAGE_TEST_KAFKA_PASSWORD", good)
	cfg, _ := config.Parse([]byte(fmt.Sprintf(secureYAML, b.Addr(), sasl, t.TempDir())), func(k string) (string, bool) { return os.LookupEnv(k) })
	dialer, transport, err := kafkaSecurity(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs, runErr := runSecured(t, fmt.Sprintf(secureYAML, b.Addr(), sasl, t.TempDir()), b.Addr(), dialer, transport, true)
	if runErr != nil {
		t.Errorf("run with the right password: %v", runErr)
	}
	if strings.Contains(logs, good) || (runErr != nil && strings.Contains(runErr.Error(), good)) {
		t.Errorf("the SASL password appears in the logs or the error")
	}
	if !strings.Contains(logs, "assigned partitions") {
		t.Errorf("expected the stage to get its partitions over SASL; logs:\n%s", logs)
	}

	t.Setenv("STAGE_TEST_KAFKA_PASSWORD", bad)
	logs, runErr = runSecured(t, fmt.Sprintf(secureYAML, b.Addr(), sasl, t.TempDir()), b.Addr(), nil, nil, false)
	if strings.Contains(logs, bad) || (runErr != nil && strings.Contains(runErr.Error(), bad)) {
		t.Errorf("the wrong SASL password appears in the logs or the error")
	}
	if strings.Contains(logs, "assigned partitions") {
		t.Errorf("the stage got partitions with a wrong password")
	}
	// Redacted config (what an operator would print) hides it too.
	if s := fmt.Sprintf("%v %+v %#v", cfg, cfg.Redacted(), cfg); strings.Contains(s, good) {
		t.Errorf("the password appears in the printed config")
	}
}

// TestTLS: the stage connects to a TLS-only broker, verifying its certificate
// against kafka.tls.ca_file.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	serverCfg, caPEM := selfSigned(t)
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"events": 2, "out": 1}, TLS: serverCfg})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tlsYAML := fmt.Sprintf("  tls:\n    enabled: true\n    ca_file: %q\n    server_name: localhost", caFile)
	text := fmt.Sprintf(secureYAML, b.Addr(), tlsYAML, filepath.Join(dir, "state"))
	cfg, err := config.Parse([]byte(text), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	dialer, transport, err := kafkaSecurity(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runSecured(t, text, b.Addr(), dialer, transport, true); err != nil {
		t.Errorf("run over TLS: %v", err)
	}
}

func selfSigned(t *testing.T) (*tls.Config, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, certPEM
}

// TestDistributedOverSASLAndTLS: the distributed mode (and so the Kafka
// release log) runs against a SASL-only and against a TLS-only broker: its
// franz-go clients — bounder group, transactional partials and progress
// writers, releaser group, release log, topic admin — get kafka.sasl and
// kafka.tls as the kafka-go clients do, and a release comes out; the SASL
// password appears in no log line.
func TestDistributedOverSASLAndTLS(t *testing.T) {
	const dist = "\n  distributed: {enabled: true, partitioner: fnv1a}" // runSecured keys with kafka-go's Hash
	distYAML := strings.Replace(secureYAML, "state: {dir: %q}", "state: {dir: %q, ledger: kafka}", 1)
	t.Run("sasl", func(t *testing.T) {
		const good = "d1st-Pa55w0rd-5b2e"
		b, err := embedded.Start(embedded.Config{
			Topics: map[string]int{"events": 1, "out": 1},
			Extra:  []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "stage", good)},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		t.Setenv("STAGE_TEST_KAFKA_PASSWORD", good)
		sasl := "  sasl:\n    mechanism: scram-sha-512\n    username: stage\n    password: ${STAGE_TEST_KAFKA_PASSWORD}" + dist
		text := fmt.Sprintf(distYAML, b.Addr(), sasl, t.TempDir())
		cfg, err := config.Parse([]byte(text), func(k string) (string, bool) { return os.LookupEnv(k) })
		if err != nil {
			t.Fatal(err)
		}
		dialer, transport, err := kafkaSecurity(cfg)
		if err != nil {
			t.Fatal(err)
		}
		logs, runErr := runSecured(t, text, b.Addr(), dialer, transport, true)
		if runErr != nil {
			t.Errorf("run: %v", runErr)
		}
		if strings.Contains(logs, good) {
			t.Error("the SASL password appears in the logs")
		}
		if !strings.Contains(logs, "release log restored from Kafka") {
			t.Errorf("the release log was not opened over SASL; logs:\n%s", e2eTail(logs))
		}
	})
	t.Run("tls", func(t *testing.T) {
		dir := t.TempDir()
		serverCfg, caPEM := selfSigned(t)
		caFile := filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := embedded.Start(embedded.Config{Topics: map[string]int{"events": 1, "out": 1}, TLS: serverCfg})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		tlsYAML := fmt.Sprintf("  tls:\n    enabled: true\n    ca_file: %q\n    server_name: localhost", caFile) + dist
		text := fmt.Sprintf(distYAML, b.Addr(), tlsYAML, filepath.Join(dir, "state"))
		cfg, err := config.Parse([]byte(text), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		dialer, transport, err := kafkaSecurity(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := runSecured(t, text, b.Addr(), dialer, transport, true); err != nil {
			t.Errorf("run over TLS: %v", err)
		}
	})
}

// e2eTail is the end of long logs.
func e2eTail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}
