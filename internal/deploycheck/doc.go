// Package deploycheck holds only tests: no Kubernetes cluster or Prometheus
// server runs where the tests run, so they check the deployment files
// against the stage with the projects' own Go packages. deploy/kubernetes/
// decodes, strictly, into the Kubernetes API types (k8s.io/api), and its
// probes, ports and scrape annotations match what the config each manifest
// mounts serves; deploy/prometheus/alerts.yml parses with Prometheus's rule
// format package (rulefmt, whose PromQL parser checks every expression), and
// every dpstage_ metric a rule reads is listed in docs/metrics.md. Both
// dependencies are imported by these tests only: the stage's binary does not
// link them.
package deploycheck
