package release

// Dominates is dominates, for the external tests.
var Dominates = dominates
