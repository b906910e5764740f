// Package lib holds nothing itself: its subfolders are the low-level helpers
// that the data-flow packages (decode, mechanism, pipeline, partial, ledger,
// …) and the tools import — special functions (special), the keyed user hash
// (siphash), retry with back-off (retry), the Kafka client id (clientid),
// the timeout-or-fence rule of Kafka transactions (kafkatxn),
// ListOffsets with a franz-go client (kafkaoffset) and
// the embedded Kafka-protocol broker (embedded). They import no package of
// the stage: every import points down to them (internal/layering tests it).
// The tools that sit above pipeline/ (cli, bench, eval, httpapi, generator,
// e2e, composecheck) are internal/'s other folders.
package lib
