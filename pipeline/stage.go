package pipeline

import (
	"sync/atomic"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/plan"
)

// Options configure a Stage (node.Options: the config, the logger, the
// brokers, the hooks for tests and views).
type Options = node.Options

// The views of a running stage, defined where the roles update them.
type (
	Stats        = node.Stats
	Readiness    = node.Readiness
	BudgetStatus = node.BudgetStatus
)

// Errors a Run returns when the state and the config disagree (package
// node documents each).
var (
	ErrConfigChanged = node.ErrConfigChanged
	ErrStateLost     = node.ErrStateLost
	ErrNoOutputTopic = node.ErrNoOutputTopic
	ErrNoInputTopic  = node.ErrNoInputTopic
)

// DropReasonHeader is the dead-letter record header that names a drop's
// reason.
const DropReasonHeader = node.DropReasonHeader

// Stage is one stage process: its shared state (node.Node) and the role
// Run starts on it, the single-process stage (package single) or the
// distributed mode's bounder and releaser (package distributed).
type Stage struct {
	n *node.Node
	// ran: Run was called (a Stage runs once).
	ran atomic.Bool
}

// New builds a Stage from opts. Nothing is connected before Run.
func New(opts Options) (*Stage, error) {
	n, err := node.New(opts)
	if err != nil {
		return nil, err
	}
	return &Stage{n: n}, nil
}

// Plan is the privacy plan derived from the config (plan.DerivePlan).
func (s *Stage) Plan() *plan.Plan { return s.n.Plan }

// Stats counts what the stage did (every drop by reason).
func (s *Stage) Stats() *Stats { return s.n.Stats }

// SelectionKeys is, per selecting histogram, the group keys tracked in its
// last selected window (private; httpapi.SelectionKeysSource).
func (s *Stage) SelectionKeys() map[string]int { return s.n.Stats.SelectionKeys() }

// Readiness returns the current readiness conditions (/readyz).
func (s *Stage) Readiness() Readiness { return s.n.Readiness() }

// Lag returns the consumer lag per assigned input partition.
func (s *Stage) Lag() map[int]int64 { return s.n.Lag() }

// Budget returns the spend of the budget periods seen since the start.
func (s *Stage) Budget() []BudgetStatus { return s.n.Budget() }

// WindowBound returns each histogram's window-bound drop share in its last
// closed window (node.Node.WindowBound; nil without
// contribution.max_windows_per_user). Private: the operator listener's.
func (s *Stage) WindowBound() []aggregate.WindowShare { return s.n.WindowBound() }

// BrokerTimeRegressions returns, per input partition, how many times a
// broker-set record time ran backwards (node.Node.BrokerTimeRegressions).
func (s *Stage) BrokerTimeRegressions() map[int]int64 { return s.n.BrokerTimeRegressions() }

// BrokerTimeRegressionsBeyondMargin returns, per input partition, the
// regressions past window.clock_skew_margin
// (node.Node.BrokerTimeRegressionsBeyondMargin).
func (s *Stage) BrokerTimeRegressionsBeyondMargin() map[int]int64 {
	return s.n.BrokerTimeRegressionsBeyondMargin()
}
