package node

import (
	"fmt"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/clientid"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// kgoOpts are the options every franz-go (kgo) client of the stage starts
// with — the release log (state.ledger: kafka) and the distributed mode's
// internal topics: kafka.tls and kafka.sasl, as kafka-go's dialer has them
// for the input and output topics (internal/cli), and the client id
// "stage@<hostname>/<pid>" (internal/lib/clientid).
func kgoOpts(k config.Kafka) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.ClientID(clientid.ClientID())}
	if k.TLS.Enabled {
		tc, err := k.TLS.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("node: kafka.tls: %w", err)
		}
		opts = append(opts, kgo.DialTLSConfig(tc), kgo.DialTimeout(10*time.Second))
	}
	s := k.SASL
	switch s.Mechanism {
	case "":
	case config.SASLPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
	case config.SASLScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
	case config.SASLScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("node: kafka.sasl.mechanism %q is not supported", s.Mechanism)
	}
	return opts, nil
}
