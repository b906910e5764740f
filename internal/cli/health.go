package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/dpstage/stage/config"
)

// maxHealthTimeout bounds --timeout: a health check that hangs longer is not
// a check.
const maxHealthTimeout = time.Minute

// Health implements `stage health`: one GET of the running stage's /healthz
// (or, with --ready, /readyz) on the address of http.address in --config
// (http.operator_address when http.address is off; or --address), for container health checks. It needs nothing but the
// binary, so a distroless image can run it. It exits 0 when the answer is 200
// and 1 otherwise — also for bad flags and configs, since Docker reserves
// exit code 2 of health checks.
func Health(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the stage's YAML config: its http.address is checked")
	addr := fs.String("address", "", "host:port of the stage's HTTP server (instead of --config)")
	ready := fs.Bool("ready", false, "check /readyz (state loaded, broker reached, partitions assigned) instead of /healthz (the process answers)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long (at most 1m)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "stage health: "+format+"\n", a...)
		return 1
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if *timeout <= 0 || *timeout > maxHealthTimeout {
		return fail("--timeout must be greater than 0 and at most %s, got %s", maxHealthTimeout, *timeout)
	}
	target := *addr
	switch {
	case target != "" && *path != "":
		return fail("give --config or --address, not both")
	case target == "" && *path == "":
		return fail("--config or --address is required")
	case target == "":
		cfg, err := config.Load(*path)
		if err != nil {
			return fail("%s: %v", *path, err)
		}
		// The probes answer on both listeners: the public one, else the
		// operator one.
		target = cfg.HTTP.Address
		if target == "" {
			target = cfg.HTTP.OperatorAddress
		}
		if target == "" {
			return fail("%s: http.address and http.operator_address are empty: the stage serves no health endpoint", *path)
		}
	}
	url, err := healthURL(target, *ready)
	if err != nil {
		return fail("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	status, body, err := get(ctx, url)
	if err != nil {
		return fail("unhealthy: GET %s: %v", url, err)
	}
	if status != http.StatusOK {
		return fail("unhealthy: GET %s: %d %s", url, status, body)
	}
	fmt.Fprintf(stdout, "healthy: GET %s: %d %s\n", url, status, body)
	return 0
}

// healthURL is the probe's URL on a listen address: an unspecified host
// (every interface) is reached on loopback.
func healthURL(addr string, ready bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("address %q is not host:port: %w", addr, err)
	}
	if port == "0" {
		return "", fmt.Errorf("address %q has port 0 (a free port picked at start): give the port the stage printed with --address", addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	p := "/healthz"
	if ready {
		p = "/readyz"
	}
	return "http://" + net.JoinHostPort(host, port) + p, nil
}

// get fetches url once, without following redirects, and returns its status
// and the start of its body on one line.
func get(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	client := &http.Client{
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	res, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, "", fmt.Errorf("no answer within the timeout: %w", err)
		}
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1024))
	if err != nil {
		return 0, "", fmt.Errorf("read the answer: %w", err)
	}
	return res.StatusCode, strings.Join(strings.Fields(string(b)), " "), nil
}
