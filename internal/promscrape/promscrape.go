// Package promscrape reads a Prometheus metrics endpoint the way Prometheus does, with the
// exposition format's own parser (not by matching lines), for tests that check what an
// exporter serves.
package promscrape

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are the metric families of one scrape, by name.
type Metrics map[string]*dto.MetricFamily

// Get scrapes url (text exposition format) once.
func Get(ctx context.Context, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	fams, err := Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
	return fams, nil
}

// Parse reads one scrape's text (for endpoints reached otherwise than by a plain GET, such as
// kube-apiserver's /metrics through its client).
func Parse(r io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// Sample is one series of a family: its labels and value (gauge, counter or untyped).
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Samples lists the series of family name (none when it is absent).
func (m Metrics) Samples(name string) []Sample {
	f := m[name]
	if f == nil {
		return nil
	}
	var out []Sample
	for _, s := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		var v float64
		switch {
		case s.Gauge != nil:
			v = s.GetGauge().GetValue()
		case s.Counter != nil:
			v = s.GetCounter().GetValue()
		case s.Untyped != nil:
			v = s.GetUntyped().GetValue()
		default:
			continue
		}
		out = append(out, Sample{Labels: labels, Value: v})
	}
	return out
}

// Value is the value of the first series of family name whose labels include want; found is
// false when there is none.
func (m Metrics) Value(name string, want map[string]string) (value float64, found bool) {
	for _, s := range m.Samples(name) {
		match := true
		for k, v := range want {
			match = match && s.Labels[k] == v
		}
		if match {
			return s.Value, true
		}
	}
	return 0, false
}
