package embedded

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestPinnedPort: Config.Port (kafka.embedded_port) is where the broker
// listens and what Addr reports, and a port already taken is an error naming
// it, not a silent move to another port.
func TestPinnedPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	b, err := Start(Config{Port: port, Topics: map[string]int{"events": 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	want := "127.0.0.1:" + strconv.Itoa(port)
	if b.Addr() != want {
		t.Errorf("Addr %s, want %s", b.Addr(), want)
	}
	conn, err := net.Dial("tcp", want)
	if err != nil {
		t.Fatalf("nothing listens on the pinned port: %v", err)
	}
	conn.Close()

	// The port is now the first broker's.
	if b2, err := Start(Config{Port: port}); err == nil {
		b2.Close()
		t.Fatal("a second broker started on a taken port")
	} else if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
}
