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

// TLS configures transport security towards the brokers. Every setting but
// Enabled is ignored while Enabled is false.
type TLS struct {
	// Enabled turns TLS on. Default false.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the certificate authorities that sign the
	// brokers' certificates. Empty: the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and its private key
	// (PEM), for brokers that require client authentication. Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name checked against the brokers'
	// certificates. Empty: the host of each broker address.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify disables verification of the brokers' certificates.
	// For tests only. Default false.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// SASL configures authentication towards the brokers. It is on when any of
// its keys is set, and then all three are required.
type SASL struct {
	// Mechanism: plain | scram-sha-256 | scram-sha-512.
	Mechanism string `yaml:"mechanism"`
	// Username to authenticate as.
	Username string `yaml:"username"`
	// Password may only be given as a ${ENV_VAR} reference: a literal
	// password in the file is an error. Never printed (see [SASL.String],
	// [Config.Redacted]).
	Password string `yaml:"password" secret:"true"`
}
