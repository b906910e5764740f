package config

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// interpolated is the result of resolving the ${...} references of one
// scalar node.
type interpolated struct {
	value   string
	fromEnv bool     // at least one reference
	vars    []string // the variables referenced, in order
	pure    bool     // the whole value is exactly one ${NAME}, without default
}

// refs names the references for messages that must not show the value.
func (r *interpolated) refs() string {
	parts := make([]string, len(r.vars))
	for i, v := range r.vars {
		parts[i] = "${" + v + "}"
	}
	return strings.Join(parts, ", ")
}

var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// interpolate resolves the references in a scalar node's value once (an
// aliased node is shared). It returns nil after reporting a problem. The
// result is never parsed as YAML again, so a value from the environment
// cannot add keys or change the document's structure.
func (d *decoder) interpolate(n *yaml.Node, path string) *interpolated {
	if r, ok := d.resolved[n]; ok {
		return r
	}
	r, errs := expand(n.Value, d.lookup)
	for _, e := range errs {
		d.add(n, path, "%s", e)
	}
	if len(errs) > 0 {
		r = nil
	}
	d.resolved[n] = r
	return r
}

// expand replaces ${NAME} with the variable's value and ${NAME:-default}
// with the value, or default when the variable is unset or empty. "$${"
// stands for a literal "${"; any other "$" is kept as is. Error messages
// name variables, never their values.
func expand(s string, lookup func(string) (string, bool)) (*interpolated, []string) {
	r := &interpolated{}
	if !strings.Contains(s, "${") {
		r.value = s
		return r, nil
	}
	var b strings.Builder
	var errs []string
	refs, defaults := 0, false
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "$${") {
			b.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			b.WriteByte(s[i])
			i++
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			errs = append(errs, "unterminated ${ (missing }); write $${ for a literal ${")
			break
		}
		body := s[i+2 : i+2+end]
		i += 2 + end + 1
		name, def, hasDef := strings.Cut(body, ":-")
		if !varName.MatchString(name) {
			errs = append(errs, fmt.Sprintf("invalid reference %s: use ${NAME} or ${NAME:-default}, NAME of letters, digits and _", quoteRef(body)))
			continue
		}
		if strings.Contains(def, "${") {
			errs = append(errs, fmt.Sprintf("nested reference in the default of ${%s:-...} is not supported", name))
			continue
		}
		refs++
		defaults = defaults || hasDef
		r.vars = append(r.vars, name)
		val, ok := lookup(name)
		switch {
		case ok && (val != "" || !hasDef):
			b.WriteString(val)
		case hasDef:
			b.WriteString(def)
		default:
			errs = append(errs, fmt.Sprintf("environment variable %s is not set (use ${%s:-default} for a default)", name, name))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	r.value = b.String()
	r.fromEnv = refs > 0
	r.pure = refs == 1 && !defaults && s == "${"+r.vars[0]+"}"
	return r, nil
}

// quoteRef shows a malformed reference from the file (never a value), cut
// short.
func quoteRef(body string) string {
	if len(body) > 40 {
		body = body[:40] + "..."
	}
	return fmt.Sprintf("%q", "${"+body+"}")
}
