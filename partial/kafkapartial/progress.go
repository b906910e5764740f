package kafkapartial

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/internal/lib/kafkaoffset"

	"github.com/dpstage/stage/partial"
)

// AdmittedRecord is one admissions record still present in a progress
// partition, with its key.
type AdmittedRecord struct {
	Key string
	*partial.Admitted
}

// Restored is a progress partition's committed state.
type Restored struct {
	// Progress is the latest Progress; nil for a partition never emitted.
	Progress *partial.Progress
	// Admitted are the admissions records not tombstoned, in log order of
	// their latest write.
	Admitted []AdmittedRecord
}

// Restore reads progress partition p read_committed from its start to
// the last stable offset taken first, and folds it (latest value per key,
// tombstones delete). Call it after OpenWriter fenced the previous owner:
// only p's transactional id writes to the partition, so no transaction is
// open there and the LSO is the end of everything committed. The read
// keeps control records and stops at the record just below the LSO: a
// partition written only transactionally ends with a commit or abort
// marker, and the last batch of a partition (in the active segment) is
// never compacted, so that record is always there.
func (w *Writer) Restore(ctx context.Context) (*Restored, error) {
	w.mu.Lock()
	dead := w.dead
	w.mu.Unlock()
	if dead != nil {
		return nil, dead
	}
	topic, p := w.cfg.ProgressTopic, int32(w.cfg.Partition)
	start, lso, err := Offsets(ctx, w.cl, topic, p)
	if err != nil {
		return nil, fmt.Errorf("kafkapartial: restore %s/%d: %w", topic, p, err)
	}
	out := &Restored{}
	if lso <= start {
		return out, nil
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(w.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(start)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, w.cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafkapartial: restore consumer: %w", err)
	}
	defer cl.Close()
	adm := map[string]*partial.Admitted{}
	var order []string
	for done := false; !done; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("kafkapartial: restore %s/%d to offset %d: %w", topic, p, lso, err)
		}
		if err := fs.Err(); err != nil {
			return nil, fmt.Errorf("kafkapartial: restore %s/%d: fetch: %w", topic, p, err)
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			if done || ferr != nil || r.Offset >= lso {
				done = true
				return
			}
			if r.Offset+1 >= lso {
				done = true
			}
			if r.Attrs.IsControl() {
				return
			}
			key := string(r.Key)
			switch {
			case key == partial.ProgressKey:
				if r.Value == nil {
					out.Progress = nil
					return
				}
				pr, err := partial.DecodeProgress(r.Value)
				if err != nil {
					ferr = err
					return
				}
				if pr.Partition != int(p) {
					ferr = fmt.Errorf("%w: progress of partition %d in progress partition %d", partial.ErrFormat, pr.Partition, p)
					return
				}
				out.Progress = pr
			case strings.HasPrefix(key, "adm/"):
				if r.Value == nil {
					delete(adm, key)
					return
				}
				a, err := partial.DecodeAdmitted(r.Value)
				if err != nil {
					ferr = err
					return
				}
				if _, ok := adm[key]; !ok {
					order = append(order, key)
				}
				adm[key] = a
			default:
				ferr = fmt.Errorf("%w: unknown key %q in progress partition %d", partial.ErrFormat, key, p)
			}
		})
		if ferr != nil {
			return nil, fmt.Errorf("kafkapartial: restore %s/%d: %w", topic, p, ferr)
		}
	}
	for _, k := range order {
		if a, ok := adm[k]; ok {
			out.Admitted = append(out.Admitted, AdmittedRecord{Key: k, Admitted: a})
		}
	}
	return out, nil
}

// Offsets returns the log start offset and the last stable offset of
// topic/p.
func Offsets(ctx context.Context, cl *kgo.Client, topic string, p int32) (start, lso int64, err error) {
	return kafkaoffset.Committed(ctx, cl, topic, p)
}
