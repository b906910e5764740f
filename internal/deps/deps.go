// Package deps pins the module set while the packages that use these modules
// are being written in parallel. Delete it once every module is imported by
// real code.
package deps

import (
	_ "github.com/apache/arrow/go/v15/arrow/array"
	_ "github.com/segmentio/kafka-go"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "go.etcd.io/bbolt"
	_ "go.uber.org/zap"
	_ "go.yaml.in/yaml/v3"
	_ "gonum.org/v1/gonum/mathext"
	_ "gonum.org/v1/gonum/optimize"
	_ "gonum.org/v1/gonum/stat/distmv"
	_ "gonum.org/v1/gonum/stat/distuv"
)
