package plan

import "github.com/dpstage/stage/config"

// The tracked-user cap in the distributed mode (kafka.distributed with
// contribution.max_tracked_users = K).
//
// Each input partition is bounded by its own bounder (one aggregator per
// partition worker), so the cap holds per (window, input partition): the
// tracked users of a window are T(U) = ∪_p T_K(U_p), the K smallest keyed
// user hashes of each partition's users U_p, where a user's partition is a
// function of the user alone (the producers key every event by its user,
// and the bounder drops an event read from another partition). Memory is
// then bounded by K tracked users per window per owned partition, and
// whether a user is tracked still depends on its own hash and the other
// users of its partition only — never on arrival order or other partitions.
//
// What one user changes (the argument of aggregate's package doc, per
// partition):
//
//   - add_remove: adding or removing user w changes only U_p for w's
//     partition p, so T changes by at most one in and one out, as with one
//     global cap: x′ − x = q − p with ‖p‖₁, ‖q‖₁ ≤ m. The single-process
//     mode's capped sensitivities (Δ1 = 2m, Δ2² = 2m², Δ∞ = m) stand.
//   - replace: w swapped for another user w′ may move between partitions
//     (w in p, w′ in p′ ≠ p). Removing w from U_p lets one user b into
//     T_K(U_p); adding w′ to U_p′ may push one user a out of T_K(U_p′):
//     x′ − x = (v_w′ + v_b) − (v_w + v_a), two users out and two in. This is
//     the replace shape with 2m events per side (p = v_w + v_a and
//     q = v_w′ + v_b are ≥ 0 with ‖·‖₁ ≤ 2m), so Δ1 = 4m, Δ2² = 8m²,
//     Δ∞ = 2m: DeriveSensitivity(replace, 2m). (With p = p′ it is the one
//     out, one in of the single-process mode, inside the same bound.)
//
// So the distributed mode with a cap under replace is charged as the
// single-process mode with max_events_per_user 2m; under add_remove, and
// without a cap, the charge is the single-process mode's.
// aggregate's TestNeighbourSensitivityPartitionedCap checks both on random
// neighbours over several partitions, and that the doubled bound is
// needed (a change beyond the single-process replace bound is seen).

// sensitivityEvents is the per-user event count the sensitivities of cfg
// are derived with: max_events_per_user, doubled under replace when the
// distributed mode caps tracked users per partition (see above).
func sensitivityEvents(cfg *config.Config) int {
	m := cfg.Contribution.MaxEventsPerUser
	if PartitionedCapReplace(cfg) {
		return 2 * m
	}
	return m
}

// PartitionedCapReplace reports whether cfg caps tracked users per input
// partition (kafka.distributed with contribution.max_tracked_users) under
// privacy.neighbour replace: its sensitivities are those of 2 ×
// max_events_per_user (see above).
func PartitionedCapReplace(cfg *config.Config) bool {
	return cfg.Kafka.Distributed.Enabled && cfg.Contribution.MaxTrackedUsers > 0 && cfg.Privacy.Neighbour == config.NeighbourReplace
}
