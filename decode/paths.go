package decode

import "strings"

// Field paths. A value field key is a dotted path ("context.geo.country");
// the JSON scan follows every configured path at once through a tree of
// pathNodes, one per object level, validating the whole message as before.

// pathNode is one object level of the configured paths: the keys looked
// for at that level.
type pathNode struct {
	names   []string       // the keys of this level
	m       map[string]int // names → index, when there are more than linearFields
	maxName int            // longest name
	leaf    []int          // leaf[i]: slot of the field ending at names[i], or -1
	sub     []*pathNode    // sub[i]: the next level under names[i], or nil
	under   [][]int        // under[i]: every slot below names[i] (nil when sub[i] is)
}

// add inserts the path segs ending in slot.
func (n *pathNode) add(segs []string, slot int) {
	i := n.index(segs[0])
	if i < 0 {
		i = len(n.names)
		n.names = append(n.names, segs[0])
		n.leaf = append(n.leaf, -1)
		n.sub = append(n.sub, nil)
		n.under = append(n.under, nil)
		n.maxName = max(n.maxName, len(segs[0]))
	}
	if len(segs) == 1 {
		n.leaf[i] = slot
		return
	}
	if n.sub[i] == nil {
		n.sub[i] = &pathNode{}
	}
	n.under[i] = append(n.under[i], slot)
	n.sub[i].add(segs[1:], slot)
}

func (n *pathNode) index(name string) int {
	for i, x := range n.names {
		if x == name {
			return i
		}
	}
	return -1
}

// finish builds the maps of levels with many keys.
func (n *pathNode) finish() {
	if len(n.names) > linearFields {
		n.m = make(map[string]int, len(n.names))
		for i, x := range n.names {
			n.m[x] = i
		}
	}
	for _, s := range n.sub {
		if s != nil {
			s.finish()
		}
	}
}

// lookup returns the index of the key (raw, still escaped when esc), or -1.
func (n *pathNode) lookup(key []byte, esc bool) int {
	if esc {
		if len(key) > 6*n.maxName+6 { // cannot unescape to a configured name
			return -1
		}
		var buf [stackBuf]byte
		if n.maxName > len(buf) {
			return n.lookupLongKey(key)
		}
		k, ok := unescape(buf[:n.maxName], key)
		if !ok {
			return -1
		}
		return n.lookupPlain(buf[:k])
	}
	return n.lookupPlain(key)
}

func (n *pathNode) lookupPlain(key []byte) int {
	if n.m != nil {
		if i, ok := n.m[string(key)]; ok {
			return i
		}
		return -1
	}
	for i, f := range n.names {
		if len(f) == len(key) && f == string(key) {
			return i
		}
	}
	return -1
}

// lookupLongKey handles escaped keys when a configured name is longer than
// the stack buffer (an odd configuration); it allocates.
func (n *pathNode) lookupLongKey(key []byte) int {
	buf := make([]byte, n.maxName)
	k, ok := unescape(buf, key)
	if !ok {
		return -1
	}
	return n.lookupPlain(buf[:k])
}

// throughNonObject marks the slots under a path whose level is a value
// other than an object (a string, a number, an array...): wrong_type for
// every role. A null level leaves them absent (missing).
var throughNonObject = span{kind: kindObject}

// scanObject validates the object opening at msg[i] (at nesting depth
// depth, the event object being 1) and records the values of node's keys
// in slots. Duplicate keys: the last occurrence wins, for a nested level
// as a whole (its slots are reset before it is scanned again).
func scanObject(msg []byte, i int, node *pathNode, slots []span, depth int) (int, Reason) {
	i = skipWS(msg, i+1)
	if i < len(msg) && msg[i] == '}' {
		return i + 1, ReasonNone
	}
	for {
		if i >= len(msg) || msg[i] != '"' {
			return i, ReasonBadJSON
		}
		end, esc, r := scanString(msg, i)
		if r != ReasonNone {
			return end, r
		}
		c := node.lookup(msg[i+1:end-1], esc)
		i = skipWS(msg, end)
		if i >= len(msg) || msg[i] != ':' {
			return i, ReasonBadJSON
		}
		i = skipWS(msg, i+1)
		if i >= len(msg) {
			return i, ReasonBadJSON
		}
		var sp span
		if ch := msg[i]; ch == '{' || ch == '[' {
			if c >= 0 && node.sub[c] != nil {
				for _, s := range node.under[c] {
					slots[s] = span{}
				}
			}
			if ch == '{' && c >= 0 && node.sub[c] != nil {
				if depth+1 > MaxDepth {
					return i, ReasonBadJSON
				}
				end, r = scanObject(msg, i, node.sub[c], slots, depth+1)
			} else {
				end, r = skipContainer(msg, i, depth)
				if c >= 0 && node.sub[c] != nil {
					for _, s := range node.under[c] {
						slots[s] = throughNonObject
					}
				}
			}
			k := kindObject
			if ch == '[' {
				k = kindArray
			}
			sp = span{start: i, end: end, kind: k}
		} else {
			sp, end, r = scanScalar(msg, i)
			if c >= 0 && node.sub[c] != nil {
				mark := throughNonObject
				if sp.kind == kindNull {
					mark = span{}
				}
				for _, s := range node.under[c] {
					slots[s] = mark
				}
			}
		}
		if r != ReasonNone {
			return end, r
		}
		if c >= 0 && node.leaf[c] >= 0 {
			slots[node.leaf[c]] = sp
		}
		i = skipWS(msg, end)
		if i >= len(msg) {
			return i, ReasonBadJSON
		}
		if msg[i] == '}' {
			return i + 1, ReasonNone
		}
		if msg[i] != ',' {
			return i, ReasonBadJSON
		}
		i = skipWS(msg, i+1)
	}
}

// fieldKind says what a configured field key names.
type fieldKind uint8

const (
	fieldValue     fieldKind = iota // a path into the message value
	fieldKey                        // $key
	fieldTimestamp                  // $timestamp
	fieldHeader                     // $header.<name>
)

// parseField classifies a field key (checked by config's validation).
func parseField(f string) (fieldKind, string) {
	switch {
	case f == "$key":
		return fieldKey, ""
	case f == "$timestamp":
		return fieldTimestamp, ""
	case strings.HasPrefix(f, "$header."):
		return fieldHeader, f[len("$header."):]
	}
	return fieldValue, f
}
