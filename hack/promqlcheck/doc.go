// Package promqlcheck is a separate module whose test parses every PromQL expression of the
// example Grafana dashboard and alert rules (examples/monitoring/) with Prometheus's own
// parser and checks each series they name is one that is served: the operator's (the list
// in reconciler/metrics/series) or the exporter sidecar's (testdata/exporter-series-*.txt,
// captured from the real exporter by an integration test).
//
// A module of its own because Prometheus's parser brings a large dependency graph that the
// operator's module should not carry; `make unit` runs its test.
package promqlcheck
