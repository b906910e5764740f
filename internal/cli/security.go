package cli

import (
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/dpstage/stage/config"
)

// kafkaSecurity builds kafka-go's Dialer (consumer side) and Transport
// (writer side) from kafka.tls and kafka.sasl. Both nil for plain TCP.
func kafkaSecurity(cfg *config.Config) (*kafka.Dialer, *kafka.Transport, error) {
	tlsCfg, err := cfg.Kafka.TLS.ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("kafka.tls: %w", err)
	}
	var mech sasl.Mechanism
	if s := cfg.Kafka.SASL; s.Mechanism != "" {
		switch s.Mechanism {
		case config.SASLPlain:
			mech = plain.Mechanism{Username: s.Username, Password: s.Password}
		case config.SASLScramSHA256, config.SASLScramSHA512:
			algo := scram.SHA256
			if s.Mechanism == config.SASLScramSHA512 {
				algo = scram.SHA512
			}
			m, err := scram.Mechanism(algo, s.Username, s.Password)
			if err != nil {
				// The error of scram.Mechanism does not carry the password.
				return nil, nil, fmt.Errorf("kafka.sasl: %w", err)
			}
			mech = m
		default:
			return nil, nil, fmt.Errorf("kafka.sasl.mechanism: unsupported %q", s.Mechanism)
		}
	}
	if tlsCfg == nil && mech == nil {
		return nil, nil, nil
	}
	d := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: tlsCfg, SASLMechanism: mech}
	t := &kafka.Transport{TLS: tlsCfg, SASL: mech, DialTimeout: 10 * time.Second}
	return d, t, nil
}
