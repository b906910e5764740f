package composecheck

import (
	"encoding/base64"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dpstage/stage/config"
	"go.yaml.in/yaml/v3"
)

// root is the repository root, relative to this package's directory.
const root = "../.."

// compose is the part of the Compose file format this test reads.
type compose struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Image       string            `yaml:"image"`
	Build       *build            `yaml:"build"`
	Command     []string          `yaml:"command"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Ports       []any        `yaml:"ports"` // short ("127.0.0.1:80:80") or long syntax
	Healthcheck *healthcheck `yaml:"healthcheck"`
}

type healthcheck struct {
	Test        []string `yaml:"test"`
	Interval    string   `yaml:"interval"`
	Timeout     string   `yaml:"timeout"`
	Retries     int      `yaml:"retries"`
	StartPeriod string   `yaml:"start_period"`
}

type build struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func loadCompose(t *testing.T) compose {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case
	args string
	line int
}

func loadDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		out     []instruction
		pending string
		start   int
	)
	for i, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if pending == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if pending == "" {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			pending += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		full := pending + trimmed
		pending = ""
		cmd, args, _ := strings.Cut(full, " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start})
	}
	return out
}

// execForm parses a JSON-array instruction argument (["a", "b"]).
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		t.Fatalf("Dockerfile line %d: %s is not in exec (JSON array) form: %v", in.line, in.cmd, err)
	}
	return v
}

// image describes what the Dockerfile's final image runs by default.
type image struct {
	entrypoint, cmd []string
	copied          []string // repository paths COPY'd from the build context
}

func checkDockerfile(t *testing.T, path string) image {
	t.Helper()
	ins := loadDockerfile(t, path)
	var (
		stages   []string // FROM images, in order
		names    []string // stage names, "" when unnamed
		built    string   // -o path of the go build of ./cmd/stage
		builtIn  int      // stage index of that build
		img      image
		binaryAt string // where the final stage puts the binary
	)
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			f := strings.Fields(in.args)
			stages = append(stages, f[0])
			name := ""
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				name = f[2]
			}
			names = append(names, name)
			img.entrypoint, img.cmd = nil, nil
		case "RUN":
			if strings.Contains(in.args, "go build") && strings.Contains(in.args, "./cmd/stage") {
				f := strings.Fields(in.args)
				if i := slices.Index(f, "-o"); i >= 0 && i+1 < len(f) {
					built, builtIn = f[i+1], len(stages)-1
				}
			}
		case "COPY":
			f := strings.Fields(in.args)
			var from string
			var rest []string
			for _, a := range f {
				switch {
				case strings.HasPrefix(a, "--from="):
					from = strings.TrimPrefix(a, "--from=")
				case strings.HasPrefix(a, "--"):
				default:
					rest = append(rest, a)
				}
			}
			if len(rest) < 2 {
				t.Fatalf("Dockerfile line %d: COPY needs a source and a destination", in.line)
			}
			srcs, dst := rest[:len(rest)-1], rest[len(rest)-1]
			if from == "" {
				if len(stages) > 1 {
					img.copied = append(img.copied, srcs...)
				}
				continue
			}
			if len(stages) == len(names) && built != "" && from == names[builtIn] && slices.Contains(srcs, built) {
				binaryAt = dst
			}
		case "ENTRYPOINT":
			img.entrypoint = execForm(t, in)
		case "CMD":
			img.cmd = execForm(t, in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s), want a multi-stage build", len(stages))
	}
	if !strings.HasPrefix(stages[0], "golang:1.26") {
		t.Errorf("build stage FROM %s, want golang:1.26", stages[0])
	}
	if built == "" {
		t.Fatal("no RUN go build -o ... ./cmd/stage in the Dockerfile")
	}
	if final := stages[len(stages)-1]; !strings.HasPrefix(final, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s, want gcr.io/distroless/static", final)
	}
	if binaryAt == "" {
		t.Fatalf("the final stage does not COPY --from=%s %s", names[builtIn], built)
	}
	if len(img.entrypoint) == 0 || img.entrypoint[0] != binaryAt {
		t.Errorf("ENTRYPOINT %q does not run the copied binary %s", img.entrypoint, binaryAt)
	}
	return img
}

// subcommands returns the command names the stage's CLI dispatches on: the
// string cases of the switch in internal/cli's Main (read from source, so
// the check does not depend on the CLI compiling).
func subcommands(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join(root, "internal", "cli")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "Main" || fn.Recv != nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				cc, ok := n.(*ast.CaseClause)
				if !ok {
					return true
				}
				for _, x := range cc.List {
					if lit, ok := x.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil {
							out = append(out, s)
						}
					}
				}
				return true
			})
		}
	}
	return out
}

// hostMount returns the host path mounted at target by a short-syntax
// volume list, or "".
func hostMount(vols []string, target string) string {
	for _, v := range vols {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0]
		}
	}
	return ""
}

// configArg returns the value of --config in a command.
func configArg(cmd []string) string {
	for i, a := range cmd {
		if a == "--config" && i+1 < len(cmd) {
			return cmd[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v
		}
	}
	return ""
}

func TestComposeFile(t *testing.T) {
	c := loadCompose(t)
	for _, name := range []string{"kafka", "stage", "producer"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no %q service", name)
		}
	}
	stage, producer := c.Services["stage"], c.Services["producer"]

	// The stage is built from the repository's Dockerfile.
	if stage.Build == nil {
		t.Fatal("stage service is not built from the Dockerfile")
	}
	dockerfile := filepath.Join(root, stage.Build.Context, cmpOr(stage.Build.Dockerfile, "Dockerfile"))
	if filepath.Clean(filepath.Join(root, stage.Build.Context)) != filepath.Clean(root) {
		t.Errorf("stage build context %q, want the repository root", stage.Build.Context)
	}
	img := checkDockerfile(t, dockerfile)
	for _, src := range img.copied {
		if _, err := os.Stat(filepath.Join(root, src)); err != nil {
			t.Errorf("Dockerfile copies %s, which is not in the repository", src)
		}
	}
	if want := []string{"/stage"}; !slices.Equal(img.entrypoint, want) {
		t.Errorf("image ENTRYPOINT %q, want %q", img.entrypoint, want)
	}
	if want := []string{"run", "--config", "/etc/stage/config.yaml"}; !slices.Equal(img.cmd, want) {
		t.Errorf("image CMD %q, want %q (the image runs /stage run --config /etc/stage/config.yaml)", img.cmd, want)
	}
	if main, err := os.ReadFile(filepath.Join(root, "cmd", "stage", "main.go")); err != nil || !strings.Contains(string(main), "package main") {
		t.Errorf("./cmd/stage has no main package: %v", err)
	}

	// The producer runs the same image.
	if producer.Image == "" || producer.Image != stage.Image {
		t.Errorf("producer image %q, want the stage's image %q", producer.Image, stage.Image)
	}

	cmds := subcommands(t)
	for name, svc := range map[string]service{"stage": stage, "producer": producer} {
		cmd := svc.Command
		if cmd == nil {
			cmd = img.cmd
		}
		if len(svc.Entrypoint) > 0 {
			t.Errorf("%s overrides the image entrypoint", name)
		}
		want := map[string]string{"stage": "run", "producer": "generate"}[name]
		if len(cmd) == 0 || cmd[0] != want {
			t.Errorf("%s runs %q, want /stage %s ...", name, cmd, want)
			continue
		}
		if !slices.Contains(cmds, cmd[0]) {
			t.Errorf("%s runs /stage %s, but internal/cli's Main has no %q command (it has %q)", name, cmd[0], cmd[0], cmds)
		}
		cfgPath := configArg(cmd)
		if cfgPath != "/etc/stage/config.yaml" {
			t.Errorf("%s: --config %q, want /etc/stage/config.yaml", name, cfgPath)
		}
		host := hostMount(svc.Volumes, cfgPath)
		if host == "" {
			t.Errorf("%s: nothing mounted at %s", name, cfgPath)
			continue
		}
		if filepath.Clean(host) != "deploy/stage.yaml" {
			t.Errorf("%s mounts %s at %s, want ./deploy/stage.yaml", name, host, cfgPath)
		}
		if _, err := os.Stat(filepath.Join(root, host)); err != nil {
			t.Errorf("%s mounts %s, which does not exist: %v", name, host, err)
		}
		if _, ok := svc.DependsOn["kafka-init"]; !ok {
			t.Errorf("%s does not wait for kafka-init (the topics)", name)
		}
	}
}

func TestKafkaServiceIsKRaftAndMatchesStageConfig(t *testing.T) {
	c := loadCompose(t)
	k := c.Services["kafka"]
	if !strings.HasPrefix(k.Image, "apache/kafka:") {
		t.Errorf("kafka image %q, want apache/kafka", k.Image)
	}
	env := k.Environment
	roles := strings.Split(env["KAFKA_PROCESS_ROLES"], ",")
	slices.Sort(roles)
	if !slices.Equal(roles, []string{"broker", "controller"}) {
		t.Errorf("KAFKA_PROCESS_ROLES %q, want broker,controller (single-node KRaft)", env["KAFKA_PROCESS_ROLES"])
	}
	for key := range env {
		if strings.Contains(strings.ToUpper(key), "ZOOKEEPER") {
			t.Errorf("%s set: KRaft mode has no ZooKeeper", key)
		}
	}
	if id, err := base64.RawURLEncoding.DecodeString(env["CLUSTER_ID"]); err != nil || len(id) != 16 {
		t.Errorf("CLUSTER_ID %q is not base64url of 16 bytes (err %v)", env["CLUSTER_ID"], err)
	}
	listeners := parseListeners(t, env["KAFKA_LISTENERS"])
	advertised := parseListeners(t, env["KAFKA_ADVERTISED_LISTENERS"])
	protocols := map[string]string{}
	for _, kv := range strings.Split(env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], ",") {
		name, proto, _ := strings.Cut(kv, ":")
		protocols[name] = proto
	}
	controller := env["KAFKA_CONTROLLER_LISTENER_NAMES"]
	if _, ok := listeners[controller]; !ok {
		t.Errorf("controller listener %q not among KAFKA_LISTENERS", controller)
	}
	voters := env["KAFKA_CONTROLLER_QUORUM_VOTERS"]
	if want := env["KAFKA_NODE_ID"] + "@kafka:" + portOf(listeners[controller]); voters != want {
		t.Errorf("KAFKA_CONTROLLER_QUORUM_VOTERS %q, want %q", voters, want)
	}

	// The stage's configuration, as the config package loads it.
	cfg, err := config.Load(filepath.Join(root, "deploy", "stage.yaml"))
	if err != nil {
		t.Fatalf("deploy/stage.yaml: %v", err)
	}
	if len(cfg.Kafka.Brokers) == 0 {
		t.Fatal("deploy/stage.yaml has no kafka.brokers: the stage would start its embedded broker")
	}
	for _, b := range cfg.Kafka.Brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil {
			t.Errorf("broker %q: %v", b, err)
			continue
		}
		if _, ok := c.Services[host]; !ok {
			t.Errorf("broker %q: no compose service named %q", b, host)
		}
		found := false
		for name, addr := range advertised {
			if addr == b {
				found = true
				if portOf(listeners[name]) != port {
					t.Errorf("broker %q: listener %s binds port %s", b, name, portOf(listeners[name]))
				}
				if protocols[name] != "PLAINTEXT" && !cfg.Kafka.TLS.Enabled {
					t.Errorf("broker %q: listener %s speaks %s, the stage's config has no TLS", b, name, protocols[name])
				}
			}
		}
		if !found {
			t.Errorf("broker %q is not among KAFKA_ADVERTISED_LISTENERS %q", b, env["KAFKA_ADVERTISED_LISTENERS"])
		}
	}

	// kafka-init creates the topics the stage reads and writes.
	initCmd := strings.Join(c.Services["kafka-init"].Command, " ")
	for _, topic := range []string{cfg.Kafka.InputTopic, cfg.Kafka.OutputTopic} {
		if !strings.Contains(initCmd, topic+":") {
			t.Errorf("kafka-init does not create topic %q", topic)
		}
	}
	if cfg.Generator.Enabled {
		t.Error("deploy/stage.yaml enables the built-in generator: with the producer service, events would be produced twice")
	}
}

// parseListeners maps listener name to host:port for "NAME://host:port,...".
func parseListeners(t *testing.T, s string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(s, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(l), "://")
		if !ok {
			t.Errorf("listener %q is not NAME://host:port", l)
			continue
		}
		out[name] = addr
	}
	return out
}

func portOf(hostport string) string {
	_, port, _ := net.SplitHostPort(hostport)
	return port
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// issue3Keys are the keys of the configuration example in the stage's
// specification (issue 3): deploy/stage.yaml spells out every one of them.
var issue3Keys = []string{
	"kafka.brokers", "kafka.group_id", "kafka.input_topic", "kafka.output_topic",
	"events.format", "events.time_field", "events.user_field",
	"window.size", "window.allowed_lateness",
	"histograms[0].name", "histograms[0].field", "histograms[0].bins",
	"histograms[0].overflow_bin", "histograms[0].group_by", "histograms[0].groups",
	"contribution.max_events_per_user", "contribution.max_groups_per_user",
	"privacy.mechanism", "privacy.calibration", "privacy.neighbour", "privacy.order",
	"privacy.budget.epsilon", "privacy.budget.delta", "privacy.budget.period",
}

func TestDeployConfigSpellsOutIssue3Keys(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "stage.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	paths := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				paths[p] = true
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, path+"["+strconv.Itoa(i)+"]")
			}
		}
	}
	walk(&doc, "")
	for _, k := range issue3Keys {
		if !paths[k] {
			t.Errorf("deploy/stage.yaml does not set %s", k)
		}
	}
}

// TestDistributedProfile: the profile "distributed" runs replicas of the
// stage and a producer on deploy/stage-distributed.yaml, a valid
// distributed-mode config whose topics kafka-init creates and whose
// brokers are the kafka service.
func TestDistributedProfile(t *testing.T) {
	c := loadCompose(t)
	cfg, err := config.Load(filepath.Join(root, "deploy", "stage-distributed.yaml"))
	if err != nil {
		t.Fatalf("deploy/stage-distributed.yaml: %v", err)
	}
	if !cfg.Kafka.Distributed.Enabled || !cfg.State.KafkaLedger() {
		t.Error("deploy/stage-distributed.yaml does not enable kafka.distributed with state.ledger kafka")
	}
	if !slices.Equal(cfg.Kafka.Brokers, []string{"kafka:9092"}) {
		t.Errorf("brokers %v, want the kafka service (kafka:9092)", cfg.Kafka.Brokers)
	}
	initCmd := strings.Join(c.Services["kafka-init"].Command, " ")
	for _, topic := range []string{cfg.Kafka.InputTopic, cfg.Kafka.OutputTopic} {
		if !strings.Contains(initCmd, topic+":") {
			t.Errorf("kafka-init does not create topic %q", topic)
		}
	}
	for name, verb := range map[string]string{"stage-replica": "run", "producer-distributed": "generate"} {
		svc, ok := c.Services[name]
		if !ok {
			t.Errorf("no service %s", name)
			continue
		}
		if len(svc.Command) == 0 || svc.Command[0] != verb {
			t.Errorf("%s runs %q, want /stage %s", name, svc.Command, verb)
		}
		if host := hostMount(svc.Volumes, configArg(svc.Command)); filepath.Clean(host) != "deploy/stage-distributed.yaml" {
			t.Errorf("%s mounts %q as its config, want ./deploy/stage-distributed.yaml", name, host)
		}
		if len(svc.Ports) != 0 {
			t.Errorf("%s publishes ports: replicas would collide on the host", name)
		}
	}
}
