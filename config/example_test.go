package config_test

import (
	"errors"
	"fmt"

	"github.com/dpstage/stage/config"
)

func ExampleValidationError() {
	file := `
kafka:
  input_topic: events
  output_topic: events
histograms:
  - name: pages
    field: page
    bins: [home, search, home]
    overflow_bin: other
  - name: pages
    field: page
    bins: [home]
privacy:
  mechanism: dirichlet
  budget:
    epsilon: 0
    delta: 1.5
`
	_, err := config.Parse([]byte(file), nil)
	fmt.Println(err)

	var ve *config.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.Problems[0].Path)
	}
	// Output:
	// invalid config: 7 problems
	//   kafka.output_topic: line 4: must differ from kafka.input_topic
	//   histograms[0].bins[2]: line 8: duplicate bin "home" (also bins[0])
	//   histograms[0].overflow_bin: line 9: "other" is not among the bins
	//   histograms[1].name: line 10: duplicate histogram name "pages" (also histograms[0])
	//   histograms[1].bins: line 12: must list at least 2 bins
	//   privacy.budget.epsilon: line 16: must be a finite number greater than 0
	//   privacy.budget.delta: line 17: must be a finite number strictly between 0 and 1
	// kafka.output_topic
}

func ExampleParse() {
	file := `
kafka:
  brokers: ["${KAFKA_HOST:-localhost}:9092"]
  grup_id: stage
window:
  size: one minute
`
	_, err := config.Parse([]byte(file), func(string) (string, bool) { return "", false })
	fmt.Println(err)
	// Output:
	// invalid config: 2 problems
	//   kafka.grup_id: line 4: unknown key "grup_id" (did you mean "group_id"?)
	//   window.size: line 6: "one minute": expected a Go duration such as 1m, 5s, 1h30m or 24h
}
