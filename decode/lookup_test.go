package decode

import (
	"fmt"
	"slices"
	"testing"
)

// TestSmallAndMapDomainsAgree: bins and groups of small domains are matched
// by a linear scan, larger ones by a map. A decoder whose domains are padded
// past smallDomain (extra values appended, so the declared ones keep their
// indices) must decode every message exactly as the unpadded one.
func TestSmallAndMapDomainsAgree(t *testing.T) {
	small := testConfig()
	large := testConfig()
	for i := range large.Histograms {
		h := &large.Histograms[i]
		h.Bins = slices.Clone(h.Bins)
		h.Groups = slices.Clone(h.Groups)
		for k := range smallDomain {
			h.Bins = append(h.Bins, fmt.Sprintf("pad-bin-%d", k))
			if h.GroupBy != "" {
				h.Groups = append(h.Groups, fmt.Sprintf("pad-group-%d", k))
			}
		}
	}
	ds, dl := mustNew(small), mustNew(large)
	for _, h := range ds.hists {
		if h.binList == nil {
			t.Fatal("test config: a small bin domain is not matched linearly")
		}
	}
	for _, h := range dl.hists {
		if h.binList != nil || (h.groupSlot >= 0 && h.groupList != nil) {
			t.Fatal("padded config: a large domain is matched linearly")
		}
	}
	values := []string{`"home"`, `"hom"`, `"homes"`, `"Home"`, `"h\u006fme"`, `"café"`, `"caf\u00e9"`, `"a\"b"`, `"😀"`,
		`"other"`, `""`, `"x"`, `1`, `2`, `true`, `-3`, `1.5`, `1.50`, `"1"`, `null`, `{}`, `[]`,
		`"US"`, `"DE"`, `"FR"`, `"Ü"`, `"U"`, `"USA"`, `"mobile"`, `"desktop"`, `"pad"`, `"cart"`}
	ev1, ev2 := ds.NewEvent(), dl.NewEvent()
	n := 0
	for _, page := range values {
		for _, country := range values {
			for _, code := range []string{`"1"`, `true`, `-3`, `"2"`, `7`} {
				msg := fmt.Appendf(nil, `{"ts":1700000000000,"user_id":"u1","page":%s,"country":%s,"device":%s,"code":%s}`,
					page, country, values[n%len(values)], code)
				n++
				r1, r2 := ds.Decode(msg, ev1), dl.Decode(msg, ev2)
				if r1 != r2 || !slices.Equal(ev1.Bins, ev2.Bins) || !slices.Equal(ev1.Groups, ev2.Groups) || !slices.Equal(ev1.Drops, ev2.Drops) {
					t.Fatalf("%s:\nlinear: %v bins %v groups %v drops %v\nmap:    %v bins %v groups %v drops %v",
						msg, r1, ev1.Bins, ev1.Groups, ev1.Drops, r2, ev2.Bins, ev2.Groups, ev2.Drops)
				}
			}
		}
	}
}
