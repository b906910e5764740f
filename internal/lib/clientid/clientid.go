// Package clientid names the stage's franz-go (kgo) clients to the brokers:
// "stage@<hostname>/<pid>". kafka-go's clients (the input and output
// topics) already send "<program>@<hostname> (github.com/segmentio/kafka-go)";
// kgo's default is the bare "kgo", which tells an operator nothing. With
// this name `kafka-consumer-groups --describe` shows which host (pod) and
// process holds each partition of the distributed mode's groups, and the
// tests tell which of their processes a group member is from the broker's
// view alone.
package clientid

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// prefix starts every client id this package makes.
const prefix = "stage@"

// ClientID returns this process's client id: "stage@<hostname>/<pid>"
// ("stage@unknown/<pid>" when the host name cannot be read).
func ClientID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown"
	}
	return fmt.Sprintf("%s%s/%d", prefix, h, os.Getpid())
}

// PID returns the process id in a client id made by ClientID, and false
// for any other client id.
func PID(id string) (int, bool) {
	if !strings.HasPrefix(id, prefix) {
		return 0, false
	}
	i := strings.LastIndexByte(id, '/')
	if i < 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(id[i+1:])
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}
