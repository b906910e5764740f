// Package release turns a closed window into ledger units: for every
// declared histogram it charges the window's unit to its budget period in
// the book (budget.Book), draws the release from the window's counts with
// the plan's mechanism (one draw per declared group) or, when the book
// refuses the charge, makes a budget_exhausted status instead, and records
// the whole window durably in one ledger transaction before anything is
// published. It also holds what is published: the release message schema
// (Release, Status, Params, Privacy, ReleaseID), the printer for humans
// and the Arrow copy (output.arrow_dir).
//
// Invariant: a window is recorded at most once, whole or not at all, and
// only with charges the book accepted; a window found recorded is returned
// with its recorded bytes, never redrawn (ground rules 3 and 4). The order
// record and charge → publish → mark published is the caller's (pipeline):
// nothing leaves the process before it is recorded here.
package release
