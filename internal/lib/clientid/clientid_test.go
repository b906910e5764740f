package clientid

import (
	"os"
	"strings"
	"testing"
)

func TestPID(t *testing.T) {
	own := ClientID()
	if !strings.HasPrefix(own, "stage@") {
		t.Fatalf("ClientID() = %q", own)
	}
	for _, c := range []struct {
		id   string
		pid  int
		want bool
	}{
		{own, os.Getpid(), true},
		{"stage@pod-7.example/42", 42, true},
		{"stage@a/b/9", 9, true},
		{"kgo", 0, false},
		{"stage@host", 0, false},
		{"stage@host/", 0, false},
		{"stage@host/-3", 0, false},
		{"stage@host/0", 0, false},
		{"other@host/12", 0, false},
		{"dpstage@host/12", 0, false},
	} {
		pid, ok := PID(c.id)
		if ok != c.want || pid != c.pid {
			t.Errorf("PID(%q) = %d, %v; want %d, %v", c.id, pid, ok, c.pid, c.want)
		}
	}
}
