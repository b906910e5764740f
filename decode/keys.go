package decode

import (
	"fmt"
	"math"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/keyhash"
)

// The group keys of a histogram that selects its groups (group_by and no
// listed groups, issue 30): see Event.Keys and the package doc.

// MaxKeyBytes is the longest group key a histogram that selects its groups
// counts: a longer group_by value drops the histogram's part (key_too_long).
// Keys are held per tracked user until the window closes (package
// aggregate), so the limit bounds their memory; a dashboard group is a
// short name, not a document.
const MaxKeyBytes = 512

// keep says whether a selecting histogram's key v is counted: ReasonNone,
// or why its part is dropped — longer than MaxKeyBytes (key_too_long), or
// not sampled (unsampled_key: its public hash is not below the sample
// rate's threshold; a function of the key alone, package keyhash). An empty
// key is a key like any other (an empty string is a value the producer
// sent, as "" is a bin value that can be declared); an absent or null field
// is missing_field.
func (d *Decoder) keep(v []byte) Reason {
	if len(v) > MaxKeyBytes {
		return ReasonKeyTooLong
	}
	// At rate 1 (the default) every key is sampled: no hash to compute.
	if d.keyRate != math.MaxUint64 && !keyhash.Sampled(keyhash.Sum(v), d.keyRate) {
		return ReasonUnsampledKey
	}
	return ReasonNone
}

// sampleThreshold is the decoder's key sampling threshold for
// selection.key_sample_rate (keyhash.Threshold); 0 is the default rate (a
// config not through Load's defaults), a rate outside (0, 1] an error.
func sampleThreshold(rate float64) (uint64, error) {
	if rate == 0 {
		rate = config.DefaultKeySampleRate
	}
	if !(rate > 0 && rate <= 1) {
		return 0, fmt.Errorf("decode: selection.key_sample_rate must be in (0, 1], got %v", rate)
	}
	return keyhash.Threshold(rate), nil
}
