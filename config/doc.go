// Package config loads the stage's one YAML file: strict decoding, ${ENV_VAR}
// interpolation for secrets, documented defaults, and validation that reports
// every problem at once with its YAML path.
//
// The key names are a contract: other tools write these files. Add keys, never
// rename them.
//
// # Loading
//
// [Load] reads a file and [Parse] takes its bytes; both decode, then apply
// defaults ([Config.ApplyDefaults]), then validate ([Config.Validate]). Every
// error about the content of the file is a *[ValidationError] listing
// [Problem]s, each with its YAML path ("histograms[1].bins") and its line:
//
//	invalid config: 2 problems
//	  kafka.grup_id: line 4: unknown key "grup_id" (did you mean "group_id"?)
//	  window.size: line 6: "one minute": expected a Go duration such as 1m, 5s, 1h30m or 24h
//
// Decoding problems are reported all together, and validation runs only when
// there are none. Every problem carries the line of the offending value, or,
// when the file left the value out, of its nearest enclosing key the file
// gave (privacy.budget.epsilon missing: the line of "budget:"); a problem
// with nothing in the file to point at (no histograms section at all, a
// Config built in Go) has none.
//
// yaml.v3 stops at the first syntax error, builds no partial tree, and often
// names the wrong line (the enclosing block's start, counted from 0). Parse
// finds the line of the error itself — the shortest prefix of the file that
// fails with that same error ends on it — and then checks the rest of the
// file without the top-level sections holding syntax errors (blanked, so
// line numbers stay), reporting its decoding or validation problems after the
// syntax errors. Problems that might be effects of the skipping — in a
// skipped section, or naming one — are left out:
//
//	invalid config: 3 problems
//	  line 6: yaml syntax: did not find expected '-' indicator; lines 3-6 (histograms) were skipped and the rest of the file checked
//	  privacy.mechanism: line 8: must be one of dirichlet, gaussian, laplace, laplace-posterior, got "laplacian"
//	  privacy.budget.epsilon: line 10: must be a finite number greater than 0
//
// # δ
//
// privacy.budget.delta must be at most [MaxDelta] (1e-4): δ is the chance the
// guarantee fails outright, and must be far below 1/users. With
// privacy.expected_users (a public estimate of the users per period) a δ
// with δ·users ≥ 1 is refused and δ·users > [DeltaUsersWarn] (0.01) is
// flagged by [Config.Warnings].
//
// # Strictness
//
// The file is one YAML document whose top level is a mapping. Every key must
// be one the [Config] tree declares: an unknown or misspelled key is an error
// naming the key and its line (with a suggestion when a known key is close),
// and so is a key given twice. Top-level keys starting with "x-" are ignored,
// so that they can hold YAML anchors (&name) for aliases (*name) and merge
// keys (<<: *name) elsewhere. Values must have the field's type: a quoted
// number, a fraction for a whole number, "yes" for a bool, a list where a
// string is expected are errors with their line. Durations are Go duration
// strings ("250ms", "5s", "1m", "1h30m", "24h"; no days) and never negative.
// An absent key and a null value (key:, key: ~) are the same thing.
//
// yaml.v3's Decoder parses the file into a yaml.Node tree; this package then
// decodes that tree itself rather than with yaml.v3's Decoder.KnownFields,
// because yaml.v3 cannot decode a Node strictly and its type errors quote
// values, which could be secrets from the environment.
//
// # Interpolation
//
// In scalar values (never in keys), ${NAME} is replaced by the environment
// variable NAME, and ${NAME:-default} by NAME, or by default when NAME is
// unset or empty. A variable that is unset and has no default is an error
// naming the variable and the YAML path. $${ stands for a literal ${; any
// other $ is kept as is. NAME is letters, digits and _, not starting with a
// digit; a default cannot contain }.
//
// Interpolation works on the parsed node tree, and the result is never parsed
// as YAML again: a value from the environment is always one scalar, however
// much YAML syntax it contains, so it cannot add keys or change structure. It
// is then read as the field's type (so port: ${PORT} works for a number,
// quoted or not). A value that interpolates to the empty string counts as
// absent, so the default applies. A list of strings (kafka.brokers) may be
// given as one scalar with a reference, split on commas:
// brokers: ${KAFKA_BROKERS} with KAFKA_BROKERS=a:9092,b:9092.
//
// Secrets — kafka.sasl.password, http.bearer_token and http.operator_token — may only be given as exactly one ${NAME},
// without default: a literal secret in the file is an error naming the field.
//
// No error message shows a value that came from the environment: messages
// name the variable ("value of ${PORT}: expected a whole number") or say
// "(value from the environment)". [Config.Redacted], [Config.String] and the
// YAML and JSON encodings of a Config replace secrets and every string from
// the environment by "[redacted]"; [SASL.String] and the encodings of a SASL
// hide the password.
//
// # Defaults
//
// [Config.ApplyDefaults] fills in what the file left out, with the defaults
// documented on each field (also exported as the Default* constants). A value
// the file gives explicitly is kept even when it is zero or empty: window
// allowed_lateness: 0s stays zero, and max_events_per_user: 0 is kept and
// then rejected by validation rather than silently replaced by 1. For a
// Config built in Go, every zero field is filled. privacy.budget.epsilon has
// no default. privacy.calibration defaults to concentrated for the dirichlet
// mechanism only, and privacy.prior_alpha to 1 for laplace-posterior only. A histogram without group_by has a single implicit group
// "*": see [Histogram.GroupNames]; Groups itself is left empty.
package config
