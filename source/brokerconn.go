package source

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerConn is one connection to a Kafka broker on which the fetch loop
// (Fetcher) issues protocol requests encoded and decoded with kmsg, one
// at a time. It is dialled with the settings of a kafka-go Dialer (DialFunc
// or the net.Dialer fields, TLS, SASL, ClientID), so the stage's consumer
// side keeps one source of transport security. Not safe for concurrent use.
type brokerConn struct {
	addr string
	c    net.Conn
	fmt  *kmsg.RequestFormatter
	corr int32
	// maxVersion is the broker's highest version per API key (ApiVersions);
	// -1 for keys it does not support.
	maxVersion [apiKeys]int16
	wbuf       []byte
	// rbuf holds the last response; what a response decodes to (a fetch's
	// record batches) may alias it until the next request.
	rbuf []byte
}

const (
	apiKeys = 100
	// maxResponseSize bounds a response read into memory (fetches ask for
	// at most Fetcher.maxBytes of records).
	maxResponseSize = 1 << 30
)

// dialBroker connects to addr as d would (kafka-go's Dialer.DialContext),
// asks the broker's API versions and authenticates with SASL when d says
// so. The whole handshake is bounded by d.Timeout (10 s when unset) and
// d.Deadline.
func dialBroker(ctx context.Context, d *kafka.Dialer, addr string) (*brokerConn, error) {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !d.Deadline.IsZero() {
		var cancelD context.CancelFunc
		ctx, cancelD = context.WithDeadline(ctx, d.Deadline)
		defer cancelD()
	}
	c, err := dialNet(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	clientID := d.ClientID
	if clientID == "" {
		clientID = kafka.DefaultClientID
	}
	b := &brokerConn{addr: addr, c: c, fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID))}
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	// A cancelled ctx unblocks a handshake stuck in a read.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	err = b.handshake(ctx, d)
	if !stop() || err != nil {
		c.Close()
		if err == nil || ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return b, nil
}

// dialNet opens the socket (and the TLS session) the way kafka-go's Dialer
// does.
func dialNet(ctx context.Context, d *kafka.Dialer, addr string) (net.Conn, error) {
	address := addr
	if d.Resolver != nil {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("broker address %q: %w", addr, err)
		}
		resolved, err := d.Resolver.LookupHost(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolve host %s: %w", host, err)
		}
		if len(resolved) > 0 {
			rh, rp, err := net.SplitHostPort(resolved[0])
			if err != nil { // no port in the resolved address
				rh, rp = resolved[0], ""
			}
			if port == "" {
				port = rp
			}
			address = net.JoinHostPort(rh, port)
		}
	}
	dial := d.DialFunc
	if dial == nil {
		dial = (&net.Dialer{LocalAddr: d.LocalAddr, FallbackDelay: d.FallbackDelay, KeepAlive: d.KeepAlive}).DialContext
	}
	c, err := dial(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	if d.TLS == nil {
		return c, nil
	}
	cfg := d.TLS
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = address
		if h, _, err := net.SplitHostPort(address); err == nil {
			cfg.ServerName = h
		}
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", address, err)
	}
	return tc, nil
}

// handshake learns the broker's API versions and authenticates.
func (b *brokerConn) handshake(ctx context.Context, d *kafka.Dialer) error {
	for i := range b.maxVersion {
		b.maxVersion[i] = -1
	}
	// ApiVersions v0 is answered by every broker since 0.10 and needs no
	// authentication.
	req := kmsg.NewPtrApiVersionsRequest()
	resp := kmsg.NewPtrApiVersionsResponse()
	if err := b.request(req, resp); err != nil {
		return fmt.Errorf("api versions: %w", err)
	}
	if resp.ErrorCode != 0 {
		return fmt.Errorf("api versions: %w", kafka.Error(resp.ErrorCode))
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey >= 0 && int(k.ApiKey) < apiKeys {
			b.maxVersion[k.ApiKey] = k.MaxVersion
		}
	}
	if d.SASLMechanism != nil {
		return b.authenticate(ctx, d.SASLMechanism)
	}
	return nil
}

// authenticate runs the SASL exchange (SaslHandshake v1, then
// SaslAuthenticate rounds) as kafka-go's Dialer does.
func (b *brokerConn) authenticate(ctx context.Context, mech sasl.Mechanism) error {
	if b.maxVersion[17] < 1 || b.maxVersion[36] < 0 {
		return errors.New("sasl: the broker does not support SaslHandshake v1 and SaslAuthenticate")
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version = 1
	hs.Mechanism = mech.Name()
	hr := kmsg.NewPtrSASLHandshakeResponse()
	if err := b.request(hs, hr); err != nil {
		return fmt.Errorf("sasl handshake: %w", err)
	}
	if hr.ErrorCode != 0 {
		return fmt.Errorf("sasl handshake (broker offers %v): %w", hr.SupportedMechanisms, kafka.Error(hr.ErrorCode))
	}
	host, port, _ := net.SplitHostPort(b.addr)
	pn, _ := strconv.Atoi(port)
	ctx = sasl.WithMetadata(ctx, &sasl.Metadata{Host: host, Port: pn})
	sess, state, err := mech.Start(ctx)
	if err != nil {
		return fmt.Errorf("sasl %s: %w", mech.Name(), err)
	}
	for done := false; !done; {
		ar := kmsg.NewPtrSASLAuthenticateRequest()
		ar.Version = min(b.maxVersion[36], 1)
		ar.SASLAuthBytes = state
		resp := kmsg.NewPtrSASLAuthenticateResponse()
		if err := b.request(ar, resp); err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("sasl %s: the broker closed the connection: %w", mech.Name(), kafka.SASLAuthenticationFailed)
			}
			return fmt.Errorf("sasl authenticate: %w", err)
		}
		if resp.ErrorCode != 0 {
			msg := ""
			if resp.ErrorMessage != nil {
				msg = ": " + *resp.ErrorMessage
			}
			return fmt.Errorf("sasl %s%s: %w", mech.Name(), msg, kafka.Error(resp.ErrorCode))
		}
		if done, state, err = sess.Next(ctx, resp.SASLAuthBytes); err != nil {
			return fmt.Errorf("sasl %s: %w", mech.Name(), err)
		}
	}
	return nil
}

// version returns the version of API key to use: the broker's highest, at
// most upTo, or an error when that is below least.
func (b *brokerConn) version(key, least, upTo int16) (int16, error) {
	v := min(b.maxVersion[key], upTo)
	if v < least {
		return 0, fmt.Errorf("broker %s supports %s up to v%d, the stage needs v%d: %w",
			b.addr, kmsg.NameForKey(key), b.maxVersion[key], least, kafka.UnsupportedVersion)
	}
	return v, nil
}

// request writes req and reads its response into resp (whose version is
// set to req's). What resp decodes to may alias b.rbuf until the next
// request.
func (b *brokerConn) request(req kmsg.Request, resp kmsg.Response) error {
	b.corr++
	b.wbuf = b.fmt.AppendRequest(b.wbuf[:0], req, b.corr)
	if _, err := b.c.Write(b.wbuf); err != nil {
		return err
	}
	var size [4]byte
	if _, err := io.ReadFull(b.c, size[:]); err != nil {
		return err
	}
	n := int(int32(binary.BigEndian.Uint32(size[:])))
	if n < 4 || n > maxResponseSize {
		return fmt.Errorf("%s response of %d bytes from %s: corrupt stream", kmsg.NameForKey(req.Key()), n, b.addr)
	}
	if cap(b.rbuf) < n {
		b.rbuf = make([]byte, n)
	}
	buf := b.rbuf[:n]
	if _, err := io.ReadFull(b.c, buf); err != nil {
		return err
	}
	if corr := int32(binary.BigEndian.Uint32(buf)); corr != b.corr {
		return fmt.Errorf("%s response from %s has correlation id %d, want %d", kmsg.NameForKey(req.Key()), b.addr, corr, b.corr)
	}
	body := buf[4:]
	if req.IsFlexible() && req.Key() != 18 { // ApiVersions keeps the v0 response header
		var err error
		if body, err = skipTags(body); err != nil {
			return fmt.Errorf("%s response header: %w", kmsg.NameForKey(req.Key()), err)
		}
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		return fmt.Errorf("decode %s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	return nil
}

// skipTags skips a flexible header's tagged fields.
func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("bad tag count")
	}
	b = b[k:]
	for range n {
		if _, k = binary.Uvarint(b); k <= 0 {
			return nil, errors.New("bad tag")
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < size {
			return nil, errors.New("bad tag size")
		}
		b = b[k+int(size):]
	}
	return b, nil
}

// setDeadline bounds the next request's write and read.
func (b *brokerConn) setDeadline(t time.Time) error { return b.c.SetDeadline(t) }

func (b *brokerConn) Close() error { return b.c.Close() }

// sameAddr reports whether two broker addresses name the same host:port
// (case-insensitive host).
func sameAddr(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return pa == pb && strings.EqualFold(ha, hb)
}
