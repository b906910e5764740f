package embedded

// LogAppendTime on top of upstream kfake. See the package doc for why; in
// short, kfake stores a topic's message.timestamp.type but does not apply it,
// and when it does stamp a batch (a producer set the LogAppendTime attribute)
// it keeps the producer's CRC, which corrupts the batch for CRC-checking
// clients and for kfake's own DataDir reload. Two pieces, both outside kfake:
//
//   - stampControl, a Produce control (kfake.Cluster.ControlKey) that runs
//     before kfake handles the request. For each v2 batch bound for a topic
//     whose message.timestamp.type is LogAppendTime (or whose producer set
//     the attribute) it sets FirstTimestamp and MaxTimestamp to the broker's
//     current time, clears the LogAppendTime attribute (so that kfake does
//     not restamp the batch and leave its CRC stale), sets attrStamped
//     instead and recomputes the CRC. kfake then validates and stores an
//     intact batch; the mark is part of the stored bytes, so it survives
//     Stop/Restart and says per batch, as Kafka's attribute does, that its
//     time is the broker's.
//   - listener/conn, wrapped around kfake's listener (kfake.ListenFn). Each
//     connection remembers the correlation ids of the Fetch and ShareFetch
//     requests it reads and, in their responses, turns attrStamped back into
//     the LogAppendTime attribute (0x08) and recomputes the batch's CRC.
//     Consumers therefore see what a Kafka broker sends: a LogAppendTime
//     batch whose MaxTimestamp is the append time. TLS is done by this
//     listener (Config.TLS), not by kfake, so the wrapper reads plaintext.

import (
	"crypto/tls"
	"encoding/binary"
	"hash/crc32"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
)

const (
	// attrLogAppendTime is the v2 batch attribute bit that says the batch's
	// MaxTimestamp is the broker's append time.
	attrLogAppendTime = 0x0008
	// attrStamped marks a stored batch that stampControl stamped with the
	// broker's time. Bits 7-15 of the attributes are unused by Kafka and
	// ignored by kfake; the mark never leaves the broker: fetch responses
	// carry attrLogAppendTime in its place.
	attrStamped = 0x0080

	// Offsets in a v2 record batch.
	batchCRC      = 17 // int32 CRC-32C of everything from batchAttrs on
	batchAttrs    = 21 // int16
	batchFirstTs  = 27 // int64
	batchMaxTs    = 35 // int64
	batchHeader   = 61 // through NumRecords
	batchLenField = 8  // int32 length of the rest of the batch
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// setCRC recomputes the CRC of the v2 batch b.
func setCRC(b []byte) {
	binary.BigEndian.PutUint32(b[batchCRC:], crc32.Checksum(b[batchAttrs:], crc32c))
}

// stampControl returns the Produce control of cluster c (see the file
// comment). It never handles the request itself: kfake does, with the
// rewritten batches. Controls run on a goroutine of their own while the
// cluster keeps serving its admin calls, so TopicInfo may be called here.
func stampControl(c *kfake.Cluster) func(kmsg.Request) (kmsg.Response, error, bool) {
	return func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req, ok := kreq.(*kmsg.ProduceRequest)
		if !ok {
			return nil, nil, false
		}
		now := time.Now().UnixMilli()
		for i := range req.Topics {
			t := &req.Topics[i]
			var info *kfake.TopicInfo
			if req.Version >= 13 {
				info = c.TopicIDInfo(t.TopicID)
			} else {
				info = c.TopicInfo(t.Topic)
			}
			logAppend := false
			if info != nil {
				v := info.Configs[timestampTypeKey]
				logAppend = v != nil && *v == "LogAppendTime"
			}
			for j := range t.Partitions {
				p := &t.Partitions[j]
				p.Records = stampBatch(p.Records, logAppend, now)
			}
		}
		return nil, nil, false
	}
}

// stampBatch returns the produced records rec with the broker's time now
// applied if logAppend or the producer asked for it (attrLogAppendTime), and
// with any attrStamped a client set cleared. Anything that is not one intact
// v2 batch is returned as is, for kfake to reject.
func stampBatch(rec []byte, logAppend bool, now int64) []byte {
	if len(rec) < batchHeader || rec[16] != 2 ||
		int(int32(binary.BigEndian.Uint32(rec[batchLenField:])))+12 != len(rec) ||
		binary.BigEndian.Uint32(rec[batchCRC:]) != crc32.Checksum(rec[batchAttrs:], crc32c) {
		return rec
	}
	attrs := binary.BigEndian.Uint16(rec[batchAttrs:])
	stamp := logAppend || attrs&attrLogAppendTime != 0
	if !stamp && attrs&attrStamped == 0 {
		return rec
	}
	out := append([]byte(nil), rec...)
	attrs &^= attrLogAppendTime | attrStamped
	if stamp {
		attrs |= attrStamped
		binary.BigEndian.PutUint64(out[batchFirstTs:], uint64(now))
		binary.BigEndian.PutUint64(out[batchMaxTs:], uint64(now))
	}
	binary.BigEndian.PutUint16(out[batchAttrs:], attrs)
	setCRC(out)
	return out
}

// unstampBatches turns attrStamped into attrLogAppendTime in every complete
// v2 batch of a fetch response's records, in place, and reports whether it
// changed any. A trailing partial batch (a fetch may end mid-batch) is left
// alone; so is anything it cannot read.
func unstampBatches(recs []byte) bool {
	changed := false
	for len(recs) >= batchHeader {
		n := int(int32(binary.BigEndian.Uint32(recs[batchLenField:]))) + 12
		if n < batchHeader || n > len(recs) {
			break
		}
		b := recs[:n]
		recs = recs[n:]
		if b[16] != 2 {
			continue
		}
		attrs := binary.BigEndian.Uint16(b[batchAttrs:])
		if attrs&attrStamped == 0 {
			continue
		}
		binary.BigEndian.PutUint16(b[batchAttrs:], attrs&^attrStamped|attrLogAppendTime)
		setCRC(b)
		changed = true
	}
	return changed
}

// listenFn is the kfake.ListenFn of a broker: kfake's listener, with TLS
// (when tc is set) and the fetch-response rewriting of every connection.
func listenFn(tc *tls.Config, log *zap.Logger) func(network, address string) (net.Listener, error) {
	return func(network, address string) (net.Listener, error) {
		l, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		return &listener{Listener: l, tls: tc, log: log}, nil
	}
}

type listener struct {
	net.Listener
	tls *tls.Config
	log *zap.Logger // nil: silent
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.tls != nil {
		c = tls.Server(c, l.tls)
	}
	return &conn{Conn: c, log: l.log, fetches: map[int32]fetchReq{}}, nil
}

// fetchReq is what a connection remembers of a fetch request until its
// response is written.
type fetchReq struct {
	key     int16 // kmsg.Fetch or kmsg.ShareFetch
	version int16
}

// conn is one client connection as kfake sees it. kfake reads requests on
// one goroutine and writes responses on another; Read notes the fetch
// requests and Write rewrites their responses.
type conn struct {
	net.Conn
	log *zap.Logger

	// Only Read touches these: the request stream's framing.
	hdr  [12]byte // size, api key, version, correlation id of the frame being read
	hn   int      // bytes of hdr read
	skip int      // bytes of the current frame's body left to skip

	// raw: the connection does not speak Kafka frames here (a TLS record
	// came where a frame should be: kfake.TLS in Extra); set by Read, after
	// which Write passes everything through.
	raw atomic.Bool

	// Only Write touches out: response bytes not yet a complete frame.
	out []byte

	// mu guards fetches: Read adds, Write takes.
	mu      sync.Mutex
	fetches map[int32]fetchReq // by correlation id
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for b := p[:n]; len(b) > 0 && !c.raw.Load(); {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			c.skip -= k
			b = b[k:]
			continue
		}
		k := copy(c.hdr[c.hn:], b)
		c.hn += k
		b = b[k:]
		if c.hn < len(c.hdr) {
			continue
		}
		c.hn = 0
		size := int(int32(binary.BigEndian.Uint32(c.hdr[:4])))
		c.skip = max(size-8, 0)
		key, version := int16(binary.BigEndian.Uint16(c.hdr[4:])), int16(binary.BigEndian.Uint16(c.hdr[6:]))
		corr := int32(binary.BigEndian.Uint32(c.hdr[8:]))
		if c.hdr[0] == 0x16 && c.hdr[1] == 0x03 { // a TLS record, not a Kafka frame
			c.raw.Store(true)
			if c.log != nil {
				c.log.Error("embedded broker: a connection speaks TLS below the LogAppendTime rewriting, so its fetches get no LogAppendTime attribute; pass TLS as embedded.Config.TLS, not kfake.TLS in Extra")
			}
			break
		}
		if key == int16(kmsg.Fetch) || key == int16(kmsg.ShareFetch) {
			c.mu.Lock()
			c.fetches[corr] = fetchReq{key, version}
			c.mu.Unlock()
		}
	}
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	if c.raw.Load() {
		if len(c.out) > 0 { // not seen: a TLS client speaks first
			buf := append(c.out, p...)
			c.out = nil
			if _, err := c.Conn.Write(buf); err != nil {
				return 0, err
			}
			return len(p), nil
		}
		return c.Conn.Write(p)
	}
	c.out = append(c.out, p...)
	for len(c.out) >= 4 {
		n := int(binary.BigEndian.Uint32(c.out)) + 4
		if n > len(c.out) {
			break
		}
		if _, err := c.Conn.Write(c.rewrite(c.out[:n])); err != nil {
			c.out = c.out[:0]
			return 0, err
		}
		c.out = c.out[:copy(c.out, c.out[n:])]
	}
	return len(p), nil
}

// within reports whether b lies in f's memory.
func within(b, f []byte) bool {
	if len(b) == 0 {
		return true
	}
	bs, fs := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(f)))
	return bs >= fs && bs+uintptr(len(b)) <= fs+uintptr(len(f))
}

// rewrite returns response frame f (size, correlation id, header tags,
// body) with attrStamped turned into attrLogAppendTime if f answers a fetch.
// It may change f (the conn's own buffer) in place.
func (c *conn) rewrite(f []byte) []byte {
	if len(f) < 8 {
		return f
	}
	corr := int32(binary.BigEndian.Uint32(f[4:]))
	c.mu.Lock()
	req, ok := c.fetches[corr]
	delete(c.fetches, corr)
	c.mu.Unlock()
	if !ok {
		return f
	}
	var resp interface {
		kmsg.Response
		ReadFrom([]byte) error
	}
	var batches func(yield func([]byte))
	switch req.key {
	case int16(kmsg.Fetch):
		r := kmsg.NewPtrFetchResponse()
		resp, batches = r, func(yield func([]byte)) {
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					yield(p.RecordBatches)
				}
			}
		}
	default:
		r := kmsg.NewPtrShareFetchResponse()
		resp, batches = r, func(yield func([]byte)) {
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					yield(p.Records)
				}
			}
		}
	}
	resp.SetVersion(req.version)
	body := f[8:]
	if resp.IsFlexible() { // response header v1: tagged fields after the correlation id
		r := kbin.Reader{Src: body}
		kmsg.SkipTags(&r)
		if !r.Ok() {
			return f
		}
		body = r.Src
	}
	if err := resp.ReadFrom(body); err != nil {
		return f
	}
	// kbin reads the record bytes as sub-slices of body, so the batches are
	// rewritten in f itself (the rewrite keeps every size); re-encoding the
	// response is only the fallback for record bytes read as copies.
	changed, inPlace := false, true
	batches(func(b []byte) {
		changed = unstampBatches(b) || changed
		inPlace = inPlace && within(b, f)
	})
	if !changed || inPlace {
		return f
	}
	out := append([]byte(nil), f[:len(f)-len(body)]...)
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}
