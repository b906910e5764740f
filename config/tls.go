package config

import (
	"crypto/tls"
	"fmt"
)

// ClientConfig builds the crypto/tls client configuration for the brokers:
// nil (and no error) when TLS is not enabled. It reads the CA bundle and the
// client key pair named by t. TLS 1.2 is the minimum version.
func (t TLS) ClientConfig() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // opt-in, documented as for tests only
	}
	if t.CAFile != "" {
		pool, err := loadCAPool(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.cert_file: cannot load the key pair with kafka.tls.key_file: %s", safeTLSError(err))
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
