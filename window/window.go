package window

// Start returns the start (Unix ms) of the tumbling window of size sizeMs
// containing tMs; windows are aligned to the Unix epoch.
func Start(tMs, sizeMs int64) int64 {
	w := tMs - tMs%sizeMs
	if tMs < 0 && tMs%sizeMs != 0 {
		w -= sizeMs
	}
	return w
}
