// Package embedded runs an in-process Kafka-protocol broker on loopback, for
// the stage's no-Kafka-installed default, the demo and every test that needs
// Kafka. It wraps github.com/twmb/franz-go/pkg/kfake: one broker, listening on
// 127.0.0.1, with the configured topics created up front. Clients (kafka-go in
// this project) talk to it over TCP exactly as to a real broker.
//
// The broker keeps its log, topics and consumer-group offsets in a data
// directory (kfake's DataDir persistence), which is what lets Stop and Restart
// simulate a broker outage: Stop closes the listener and every client
// connection and flushes the state to disk; Restart opens a new broker on the
// same port that reloads that state. Messages and committed offsets survive
// the outage.
//
// Topics the broker creates (Config.Topics, CreateTopic) have
// message.timestamp.type=LogAppendTime unless Config.TopicConfigs says
// otherwise, as the stage's arrival watermark requires of its input topic
// (window.record_times: broker): the broker sets every record's time when it
// appends it, and consumers see LogAppendTime batches (attribute 0x08, the
// append time as MaxTimestamp, a valid CRC), before and after a Restart.
//
// Upstream kfake stores that topic config and reports it (DescribeConfigs)
// but does not apply it: it stamps a batch only when the producer set the
// LogAppendTime attribute, and then keeps the producer's CRC, so the batch
// fails CRC checks in clients and in kfake's own DataDir reload. This package
// does it around kfake instead (logappend.go): a Produce control stamps the
// batches of LogAppendTime topics with the broker's time before kfake
// appends them (with a valid CRC and an internal mark in an unused attribute
// bit), and the listener kfake serves from turns that mark into the
// LogAppendTime attribute in fetch responses. For this the listener must see
// plaintext: TLS goes in Config.TLS, never as kfake.TLS in Config.Extra. The
// workaround can go once upstream kfake applies message.timestamp.type
// itself with a correct CRC.
package embedded

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
)

// Config configures an embedded broker.
type Config struct {
	// Port to listen on, on 127.0.0.1. Zero picks a free port; either way the
	// port is kept across Restart.
	Port int
	// Topics maps topic name to partition count (at least 1). Missing topics
	// are created at Start; a topic that already exists in DataDir must have
	// exactly this many partitions.
	Topics map[string]int
	// DataDir holds the broker's log and group state. Empty: a private
	// temporary directory, removed by Close. With a directory of your own the
	// data also outlives Close (and, since kfake writes continuously, a crash
	// of the process), and a later Start on the same directory reloads it.
	DataDir string
	// GroupMinSessionTimeout is the smallest consumer-group session timeout
	// the broker accepts. Zero means 500ms (kfake's own default is 6s; the
	// lower floor lets tests use short session timeouts).
	GroupMinSessionTimeout time.Duration
	// Logger receives the broker's warnings and errors. Nil: silent.
	Logger *zap.Logger
	// Extra kfake options, e.g. kfake.EnableSASL and kfake.Superuser for
	// authentication tests. Not kfake.TLS: use TLS.
	Extra []kfake.Opt
	// TLS, if set, makes the broker accept only TLS connections with this
	// server config (done by the broker's listener, below kfake).
	TLS *tls.Config

	// TopicConfigs are topic configs of topics in Topics, set when the
	// broker creates them. Every topic it creates gets
	// message.timestamp.type=LogAppendTime unless set here (e.g. to
	// CreateTime, for a test that sets record times itself).
	TopicConfigs map[string]map[string]string
}

// timestampTypeKey is the topic config that says who sets record times.
const timestampTypeKey = "message.timestamp.type"

// topicConfigs is what a topic created by the broker is created with.
func (b *Broker) topicConfigs(topic string) map[string]string {
	out := map[string]string{timestampTypeKey: "LogAppendTime"}
	maps.Copy(out, b.cfg.TopicConfigs[topic])
	return out
}

// Broker is a running (or stopped) embedded broker. All methods are safe for
// concurrent use.
type Broker struct {
	cfg     Config
	port    int
	dataDir string
	tempDir bool // dataDir was created by Start and is removed by Close
	// lock holds the data directory's lock (lockDataDir) from Start to
	// Close, across Stop and Restart.
	lock *os.File

	// mu guards cluster and closed: Stop, Restart and Close swap or clear the
	// cluster while other goroutines may ask for addresses.
	mu      sync.Mutex
	cluster *kfake.Cluster // nil while stopped
	closed  bool
}

// Start starts a broker and creates the configured topics. It first locks
// the data directory: while another broker holds it, Start returns an
// error wrapping ErrDataDirInUse (two brokers on one directory damage its
// log).
func Start(cfg Config) (*Broker, error) {
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("embedded broker: port %d out of range", cfg.Port)
	}
	for topic, parts := range cfg.Topics {
		if topic == "" {
			return nil, errors.New("embedded broker: empty topic name")
		}
		if parts < 1 {
			return nil, fmt.Errorf("embedded broker: topic %q: partitions must be at least 1, got %d", topic, parts)
		}
	}
	b := &Broker{cfg: cfg, port: cfg.Port, dataDir: cfg.DataDir}
	if b.dataDir == "" {
		dir, err := os.MkdirTemp("", "stage-embedded-kafka-")
		if err != nil {
			return nil, fmt.Errorf("embedded broker: data directory: %w", err)
		}
		b.dataDir, b.tempDir = dir, true
	}
	lock, err := lockDataDir(b.dataDir)
	if err != nil {
		b.removeTemp()
		return nil, err
	}
	b.lock = lock
	c, err := b.newCluster()
	if err != nil {
		b.removeTemp()
		return nil, err
	}
	// Remember the port actually bound so Restart comes back on it.
	_, p, err := net.SplitHostPort(c.ListenAddrs()[0])
	if err == nil {
		b.port, err = strconv.Atoi(p)
	}
	if err != nil {
		c.Close()
		b.removeTemp()
		return nil, fmt.Errorf("embedded broker: listen address: %w", err)
	}
	if err := b.ensureTopics(c); err != nil {
		c.Close()
		b.removeTemp()
		return nil, err
	}
	b.cluster = c
	return b, nil
}

func (b *Broker) newCluster() (*kfake.Cluster, error) {
	minSession := b.cfg.GroupMinSessionTimeout
	if minSession <= 0 {
		minSession = 500 * time.Millisecond
	}
	opts := []kfake.Opt{
		kfake.Ports(b.port), // one port: one broker
		kfake.DataDir(b.dataDir),
		kfake.GroupMinSessionTimeout(minSession),
		kfake.ListenFn(listenFn(b.cfg.TLS, b.cfg.Logger)),
	}
	if b.cfg.Logger != nil {
		opts = append(opts, kfake.WithLogger(zapLogger{b.cfg.Logger}))
	}
	opts = append(opts, b.cfg.Extra...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("embedded broker on 127.0.0.1:%d: %w", b.port, err)
	}
	c.ControlKey(int16(kmsg.Produce), stampControl(c)) // LogAppendTime (logappend.go)
	return c, nil
}

// ensureTopics creates the configured topics that do not exist yet and checks
// the partition count of those that do (reloaded from DataDir).
func (b *Broker) ensureTopics(c *kfake.Cluster) error {
	names := make([]string, 0, len(b.cfg.Topics))
	for t := range b.cfg.Topics {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		want := b.cfg.Topics[t]
		if info := c.TopicInfo(t); info != nil {
			if got := len(c.PartitionInfos(t)); got != want {
				return fmt.Errorf("embedded broker: topic %q in %s has %d partitions, configured %d", t, b.dataDir, got, want)
			}
			if v, wantTT := info.Configs[timestampTypeKey], b.topicConfigs(t)[timestampTypeKey]; (v == nil || *v != wantTT) && b.cfg.Logger != nil {
				b.cfg.Logger.Warn("embedded broker: a topic in the data directory was created with another message.timestamp.type (by an older version?); remove the data directory to recreate it",
					zap.String("topic", t), zap.String("dir", b.dataDir), zap.String("want", wantTT))
			}
			continue
		}
		if err := c.CreateTopic(t, int32(want), b.topicConfigs(t)); err != nil {
			return fmt.Errorf("embedded broker: create topic %q: %w", t, err)
		}
	}
	return nil
}

// Addr returns the broker's host:port (127.0.0.1:port). It stays the same
// across Stop and Restart.
func (b *Broker) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
}

// Addrs returns the bootstrap list: the one broker's address.
func (b *Broker) Addrs() []string { return []string{b.Addr()} }

// DataDir returns the directory holding the broker's state.
func (b *Broker) DataDir() string { return b.dataDir }

// Running reports whether the broker is accepting connections (not stopped,
// not closed).
func (b *Broker) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cluster != nil
}

// CreateTopic creates a topic with the given number of partitions (and
// message.timestamp.type LogAppendTime unless Config.TopicConfigs sets it).
// It is an error if the topic exists or the broker is stopped.
func (b *Broker) CreateTopic(topic string, partitions int) error {
	if partitions < 1 {
		return fmt.Errorf("embedded broker: topic %q: partitions must be at least 1, got %d", topic, partitions)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cluster == nil {
		return errors.New("embedded broker: stopped")
	}
	if err := b.cluster.CreateTopic(topic, int32(partitions), b.topicConfigs(topic)); err != nil {
		return fmt.Errorf("embedded broker: create topic %q: %w", topic, err)
	}
	return nil
}

// Cluster returns the underlying kfake cluster for fault injection and
// inspection in tests, or nil while the broker is stopped. It is replaced by
// Restart.
func (b *Broker) Cluster() *kfake.Cluster {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cluster
}

// Stop takes the broker away: the listener closes (new connections are
// refused), every open client connection is closed, and the state is flushed
// to the data directory. Stopping a stopped broker does nothing.
func (b *Broker) Stop() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("embedded broker: closed")
	}
	if b.cluster != nil {
		b.cluster.Close()
		b.cluster = nil
	}
	return nil
}

// Restart brings a stopped broker back on the same port with the data it had
// when it stopped (messages, topics, committed offsets). Restarting a running
// broker stops it first. Clients reconnect on their own.
func (b *Broker) Restart() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("embedded broker: closed")
	}
	if b.cluster != nil {
		b.cluster.Close()
		b.cluster = nil
	}
	// The port was just released by us; retry briefly in case the kernel
	// has not let go of it yet.
	var (
		c   *kfake.Cluster
		err error
	)
	for attempt := 0; attempt < 50; attempt++ {
		if c, err = b.newCluster(); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	if err := b.ensureTopics(c); err != nil {
		c.Close()
		return err
	}
	b.cluster = c
	return nil
}

// Close stops the broker for good, frees the data directory's lock and
// removes the directory if Start created it. Close is idempotent.
func (b *Broker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if b.cluster != nil {
		b.cluster.Close()
		b.cluster = nil
	}
	return b.removeTemp()
}

func (b *Broker) removeTemp() error {
	if b.lock != nil {
		b.lock.Close() // frees the data directory for another broker
		b.lock = nil
	}
	if !b.tempDir {
		return nil
	}
	if err := os.RemoveAll(b.dataDir); err != nil {
		return fmt.Errorf("embedded broker: remove %s: %w", b.dataDir, err)
	}
	return nil
}

// zapLogger forwards kfake's logs to zap. kfake's info and debug levels log
// every request, so they go to zap's debug level.
type zapLogger struct{ l *zap.Logger }

func (z zapLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	s := z.l.Sugar()
	switch level {
	case kfake.LogLevelError:
		s.Errorf("kfake: "+msg, args...)
	case kfake.LogLevelWarn:
		s.Warnf("kfake: "+msg, args...)
	default:
		s.Debugf("kfake: "+msg, args...)
	}
}
