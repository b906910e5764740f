package composecheck

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
)

// TestPublishedPortsOnLoopback: every port the compose file publishes on the
// host is bound to loopback. The stage's /metrics, Grafana and above all
// Kafka (whose topics hold the raw, non-private events) must not be open to
// the network by default.
func TestPublishedPortsOnLoopback(t *testing.T) {
	c := loadCompose(t)
	published := 0
	for name, svc := range c.Services {
		for _, p := range svc.Ports {
			published++
			var hostIP string
			switch v := p.(type) {
			case string:
				hostIP = shortPortHostIP(v)
			case int:
				hostIP = "" // "8080": a random host port on every interface
			case map[string]any:
				hostIP, _ = v["host_ip"].(string)
			default:
				t.Errorf("%s: port %v: unknown syntax", name, p)
				continue
			}
			if ip := net.ParseIP(hostIP); ip == nil || !ip.IsLoopback() {
				t.Errorf("%s publishes %v on %q, want 127.0.0.1 (loopback only)", name, p, hostIP)
			}
		}
	}
	if published == 0 {
		t.Error("no published ports found: the check checks nothing")
	}
}

// shortPortHostIP returns the host IP of a short-syntax port
// ("[HOST_IP:]HOST:CONTAINER[/proto]"), "" when there is none.
func shortPortHostIP(s string) string {
	s, _, _ = strings.Cut(s, "/")
	if strings.HasPrefix(s, "[") { // [::1]:80:80
		if i := strings.Index(s, "]"); i > 0 {
			return s[1:i]
		}
	}
	parts := strings.Split(s, ":")
	if len(parts) == 3 {
		return parts[0]
	}
	return ""
}

// TestStageHealthcheck: the stage service has a health check that a
// distroless image can run (exec form, the image's own binary), through a
// subcommand and flags the CLI has, against the config the stage runs with,
// whose HTTP server listens on the port the compose file publishes, and with
// a flag timeout below compose's.
func TestStageHealthcheck(t *testing.T) {
	c := loadCompose(t)
	stage := c.Services["stage"]
	hc := stage.Healthcheck
	if hc == nil || len(hc.Test) < 3 {
		t.Fatalf("stage service has no health check (healthcheck.test = [\"CMD\", \"/stage\", \"health\", ...])")
	}
	img := checkDockerfile(t, filepath.Join(root, "Dockerfile"))
	if hc.Test[0] != "CMD" {
		t.Errorf("healthcheck test %q: want the exec form [\"CMD\", ...]: the distroless image has no shell", hc.Test)
	}
	if len(img.entrypoint) == 0 || hc.Test[1] != img.entrypoint[0] {
		t.Errorf("healthcheck runs %q, want the image's binary %q", hc.Test[1], img.entrypoint)
	}
	if hc.Test[2] != "health" || !slices.Contains(subcommands(t), "health") {
		t.Errorf("healthcheck runs /stage %s; want the health subcommand, which internal/cli's Main must have (it has %q)", hc.Test[2], subcommands(t))
	}
	args := hc.Test[3:]
	flags := healthFlags(t)
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if !slices.Contains(flags, name) {
				t.Errorf("healthcheck passes --%s, which stage health does not define (it has %q)", name, flags)
			}
		}
	}

	// The config it reads is the stage's own.
	cfgPath := configArg(args)
	if cfgPath == "" || cfgPath != configArg(stage.Command) {
		t.Fatalf("healthcheck --config %q, want the stage's %q", cfgPath, configArg(stage.Command))
	}
	host := hostMount(stage.Volumes, cfgPath)
	cfg, err := config.Load(filepath.Join(root, host))
	if err != nil {
		t.Fatalf("%s: %v", host, err)
	}
	if cfg.HTTP.Address == "" {
		t.Fatal("the stage's config turns the HTTP server off: nothing for the health check to ask")
	}
	_, port, err := net.SplitHostPort(cfg.HTTP.Address)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range stage.Ports {
		if s, ok := p.(string); ok {
			s, _, _ = strings.Cut(s, "/")
			if f := strings.Split(s, ":"); f[len(f)-1] == port {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("http.address %s: port %s is not the container port the stage service publishes (%v)", cfg.HTTP.Address, port, stage.Ports)
	}

	// Timing: the command gives up before compose does.
	flagTimeout := 5 * time.Second // stage health's default
	for i, a := range args {
		if a == "--timeout" && i+1 < len(args) {
			if flagTimeout, err = time.ParseDuration(args[i+1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	composeTimeout, err := time.ParseDuration(hc.Timeout)
	if err != nil {
		t.Fatalf("healthcheck timeout %q: %v", hc.Timeout, err)
	}
	if flagTimeout >= composeTimeout {
		t.Errorf("stage health --timeout %s is not below the healthcheck timeout %s", flagTimeout, composeTimeout)
	}
	for what, d := range map[string]string{"interval": hc.Interval, "start_period": hc.StartPeriod} {
		if _, err := time.ParseDuration(d); err != nil {
			t.Errorf("healthcheck %s %q: %v", what, d, err)
		}
	}
}

// healthFlags lists the flags internal/cli's Health defines (read from
// source: fs.String("config", ...) and the like).
func healthFlags(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "internal", "cli", "health.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !slices.Contains([]string{"String", "Bool", "Duration", "Int"}, sel.Sel.Name) {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "fs" {
			return true
		}
		if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				out = append(out, s)
			}
		}
		return true
	})
	if len(out) == 0 {
		t.Fatal("no flags found in internal/cli/health.go")
	}
	return out
}

// ignoreRule is one line of a .dockerignore.
type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
}

// loadDockerignore reads .dockerignore with Docker's rules: comments and
// blank lines skipped, "!" re-includes, patterns cleaned and relative to the
// context root, "*" and "?" within one path element, "**" across any number
// of them.
func loadDockerignore(t *testing.T) []ignoreRule {
	t.Helper()
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatalf(".dockerignore: %v (without it .git and the demo's state go into the build context)", err)
	}
	defer f.Close()
	var rules []ignoreRule
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var r ignoreRule
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			r.negate, line = true, strings.TrimSpace(rest)
		}
		line = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(line)), "/")
		var b strings.Builder
		b.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch {
			case strings.HasPrefix(line[i:], "**/"):
				b.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				b.WriteString(".*")
				i++
			case line[i] == '*':
				b.WriteString("[^/]*")
			case line[i] == '?':
				b.WriteString("[^/]")
			default:
				b.WriteString(regexp.QuoteMeta(line[i : i+1]))
			}
		}
		b.WriteString("$")
		r.re = regexp.MustCompile(b.String())
		rules = append(rules, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rules
}

// ignored reports whether the context path p (slash-separated, relative to
// the root) is left out: the last rule matching p or one of its parent
// directories decides.
func ignored(rules []ignoreRule, p string) bool {
	out := false
	for _, r := range rules {
		match := false
		for q := p; ; {
			if r.re.MatchString(q) {
				match = true
				break
			}
			i := strings.LastIndex(q, "/")
			if i < 0 {
				break
			}
			q = q[:i]
		}
		if match {
			out = !r.negate
		}
	}
	return out
}

var goEmbed = regexp.MustCompile(`^//go:embed\s+(.+)$`)

// TestDockerignore: the build context leaves out version control and the
// stage's state (the quickstart demo's included), and keeps everything the
// Dockerfile and `go build ./cmd/stage` read.
func TestDockerignore(t *testing.T) {
	rules := loadDockerignore(t)
	demo, err := config.Load(filepath.Join(root, "examples", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	demoState := filepath.ToSlash(filepath.Clean(demo.State.Dir))
	if filepath.IsAbs(demoState) || strings.HasPrefix(demoState, "..") {
		t.Fatalf("quickstart state.dir %q is outside the repository", demo.State.Dir)
	}
	for _, p := range []string{
		".git", ".git/HEAD", ".git/objects/ab/cdef",
		demoState + "/ledger.db", demoState + "/kafka/events-0.log",
		strings.TrimPrefix(config.DefaultStateDir, "./") + "/ledger.db",
		"deploy/stage-state/ledger.db",
		"stage", "eval-out/l2.csv", "plan-out/plan.png", "internal/cli/cli.test",
	} {
		if !ignored(rules, p) {
			t.Errorf(".dockerignore lets %s into the build context", p)
		}
	}

	// What the build reads: the module files, every non-test Go file and
	// its //go:embed files, and what the Dockerfile COPYs.
	img := checkDockerfile(t, filepath.Join(root, "Dockerfile"))
	need := []string{"go.mod", "go.sum"}
	for _, src := range img.copied {
		if src != "." && src != "./" {
			need = append(need, filepath.ToSlash(filepath.Clean(src)))
		}
	}
	goFiles := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && (rel == ".git" || strings.HasPrefix(rel, "stage-state")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		goFiles++
		need = append(need, rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(src), "\n") {
			m := goEmbed.FindStringSubmatch(strings.TrimSpace(line))
			if m == nil {
				continue
			}
			for _, pat := range strings.Fields(m[1]) {
				files, _ := filepath.Glob(filepath.Join(filepath.Dir(path), pat))
				if len(files) == 0 {
					t.Errorf("%s: //go:embed %s matches nothing", rel, pat)
				}
				for _, f := range files {
					r, _ := filepath.Rel(root, f)
					need = append(need, filepath.ToSlash(r))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if goFiles < 10 {
		t.Fatalf("found %d Go files: the walk is broken", goFiles)
	}
	for _, p := range need {
		if ignored(rules, p) {
			t.Errorf(".dockerignore leaves out %s, which the image build needs", p)
		}
	}
}
