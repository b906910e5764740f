package decode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/srtest"
)

// TestRegistryTLS: events.schema_registry.tls.ca_file lets the decoder
// trust a registry's certificate; without it the https registry is not
// trusted, which holds (a misconfiguration, not bad input).
func TestRegistryTLS(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "srtest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := srtest.New(srtest.WithTLS(&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	id, _ := reg.Register("events-value", srtest.Avro, regV1)
	rec := wire(uint32(id), mustAvro(t, avro.MustParse(regV1), map[string]any{"user": map[string]any{"id": "u"}, "ts": t0, "page": "home"}))

	cfg := registryConfig(reg.URL())
	cfg.Events.SchemaRegistry.Username, cfg.Events.SchemaRegistry.Password = "", ""
	untrusted := mustNew(cfg)
	ev := untrusted.NewEvent()
	if r := untrusted.Decode(rec, ev); !r.Hold() {
		t.Fatalf("untrusted certificate: %v, want a hold", r)
	}
	cfg.Events.SchemaRegistry.TLS = config.TLS{Enabled: true, CAFile: ca}
	d := mustNew(cfg)
	want{timeMs: t0.UnixMilli(), user: "u", bins: []int32{0}}.check(t, "trusted", d.Decode(rec, ev), ev)
}
