package promqlcheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/gomomento/valkey-operator/reconciler/metrics/series"
)

// monitoring is examples/monitoring/ of the repository this module sits in.
var monitoring = filepath.Join("..", "..", "examples", "monitoring")

// query is one PromQL expression and where it was found.
type query struct{ where, expr string }

// TestExpressionsNameServedSeries: every expression of the example dashboard (panels and
// variables) and alert rules parses with Prometheus's own parser, and every series it names
// is served: by the operator (series.All, which package metrics holds equal to what it
// registers) or by the exporter of every image we ship (the fixtures an integration test
// captures from the real exporter), so no panel or alert can sit silently empty after a
// rename or on one of the images.
func TestExpressionsNameServedSeries(t *testing.T) {
	operator := map[string]bool{}
	for _, s := range series.All() {
		operator[s] = true
	}
	exporters := exporterFixtures(t)
	p := parser.NewParser(parser.Options{})

	queries := append(dashboardQueries(t), ruleQueries(t)...)
	for _, q := range queries {
		t.Run(q.where, func(t *testing.T) {
			names, err := seriesOf(p, q.expr)
			require.NoError(t, err, "%s", q.expr)
			assert.NotEmpty(t, names, "names no series: %s", q.expr)
			for _, n := range names {
				if operator[n] {
					continue
				}
				var lacking []string
				for fixture, served := range exporters {
					if !served[n] {
						lacking = append(lacking, fixture)
					}
				}
				slices.Sort(lacking)
				assert.Empty(t, lacking, "%s is not an operator series, and the exporter of these images does not serve it", n)
			}
		})
	}
}

// TestSeriesOf: the checker itself finds the names in each kind of expression the dashboard
// and rules use, including a selector by __name__, and refuses what it cannot check.
func TestSeriesOf(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	for _, tc := range []struct {
		expr    string
		want    []string
		wantErr string
	}{
		{`up`, []string{"up"}, ""},
		{`sum by (x) (rate(a_total{n=~"$namespace"}[5m])) / on (x) group_left b`, []string{"a_total", "b"}, ""},
		{`{__name__="c", job="j"} offset 5m`, []string{"c"}, ""},
		{`label_values(d{namespace=~"$namespace"}, cluster)`, []string{"d"}, ""},
		{`label_values(e, cluster)`, []string{"e"}, ""},
		{`max_over_time(f[$__rate_interval:$__interval])`, []string{"f"}, ""},
		{`time() - 1`, nil, ""},
		{`{__name__=~"valkey_.*"}`, nil, "by a regular expression"},
		{`sum(rate(g[5m])`, nil, "unclosed"},
		{`label_values(cluster)`, nil, "label_values without a series"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := seriesOf(p, tc.expr)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.ElementsMatch(t, tc.want, got)
		})
	}
}

// TestDashboardUsesItsVariables: every panel and query reads the datasource variable (so an
// import works whatever the Prometheus data source is called), and every $variable an
// expression uses is defined or one of Grafana's own.
func TestDashboardUsesItsVariables(t *testing.T) {
	d := loadDashboard(t)
	defined := map[string]bool{}
	for _, v := range d.Templating.List {
		defined[v.Name] = true
	}
	require.True(t, defined["datasource"] && defined["namespace"] && defined["cluster"], "variables: %v", defined)
	use := regexp.MustCompile(`\$\{?(\w+)`)
	for _, p := range d.allPanels() {
		if p.Type == "row" {
			continue
		}
		assert.Equal(t, "${datasource}", p.Datasource.UID, "panel %q", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			assert.Equal(t, "${datasource}", tg.Datasource.UID, "panel %q query %s", p.Title, tg.RefID)
			for _, m := range use.FindAllStringSubmatch(tg.Expr, -1) {
				assert.True(t, defined[m[1]] || strings.HasPrefix(m[1], "__"), "panel %q uses $%s, which is not defined", p.Title, m[1])
			}
		}
	}
}

// grafanaIntervals are Grafana's interval macros; each stands for a duration when the query
// runs, so a duration stands in for it when parsing.
var grafanaIntervals = regexp.MustCompile(`\$__(rate_interval|interval|range)\b`)

// labelValues is a Grafana variable query, label_values(selector, label).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*\w+\s*\)\s*$`)

// seriesOf parses expr with Prometheus's parser and lists the metric names its selectors
// name. A selector that names series by regular expression cannot be checked: an error.
func seriesOf(p parser.Parser, expr string) ([]string, error) {
	expr = grafanaIntervals.ReplaceAllString(expr, "5m")
	if strings.HasPrefix(strings.TrimSpace(expr), "label_values(") {
		m := labelValues.FindStringSubmatch(expr)
		if m == nil {
			return nil, fmt.Errorf("label_values without a series: %s", expr)
		}
		matchers, err := p.ParseMetricSelector(m[1])
		if err != nil {
			return nil, err
		}
		n, err := metricName("", matchers)
		if err != nil {
			return nil, err
		}
		return []string{n}, nil
	}
	ast, err := p.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var walkErr error
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		n, err := metricName(vs.Name, vs.LabelMatchers)
		if err != nil {
			walkErr = err
		} else if !slices.Contains(names, n) {
			names = append(names, n)
		}
		return nil
	})
	return names, walkErr
}

// metricName is a selector's metric name: its own, or its __name__ equality matcher's.
func metricName(name string, matchers []*labels.Matcher) (string, error) {
	if name != "" {
		return name, nil
	}
	for _, m := range matchers {
		if m.Name != labels.MetricName {
			continue
		}
		if m.Type != labels.MatchEqual {
			return "", fmt.Errorf("selector %s names series by a regular expression or negation: cannot check them", m)
		}
		return m.Value, nil
	}
	return "", fmt.Errorf("selector without a metric name")
}

// exporterFixtures reads testdata/exporter-series-*.txt: per image, the series names its
// exporter served in integration (TestExporterReadsOnlyStatistics; UPDATE_FIXTURES=1
// rewrites them).
func exporterFixtures(t *testing.T) map[string]map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "exporter-series-*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no exporter fixture in testdata")
	out := map[string]map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		set := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				set[l] = true
			}
		}
		require.NotEmpty(t, set, "%s lists no series", f)
		out[filepath.Base(f)] = set
	}
	return out
}

// datasource is a panel's or a query's data source reference.
type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource datasource `json:"datasource"`
	Targets    []struct {
		RefID      string     `json:"refId"`
		Expr       string     `json:"expr"`
		Datasource datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// allPanels lists the panels, those inside collapsed rows included.
func (d dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoring, "grafana-dashboard.json"))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	return d
}

// dashboardQueries lists every panel query and every query variable's query.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	d := loadDashboard(t)
	var out []query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// The query is a string in older dashboards, an object holding one in newer ones.
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q.Query); err != nil {
			require.NoError(t, json.Unmarshal(v.Query, &q), "variable %s", v.Name)
		}
		out = append(out, query{"dashboard/variable " + v.Name, q.Query})
	}
	panels := 0
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			out = append(out, query{"dashboard/" + p.Title + "/" + tg.RefID, tg.Expr})
		}
		if p.Type != "row" {
			panels++
		}
	}
	require.GreaterOrEqual(t, panels, 10, "the dashboard's panels were not found")
	return out
}

// ruleQueries lists every alert rule's expression of prometheusrule.yaml.
func ruleQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoring, "prometheusrule.yaml"))
	require.NoError(t, err)
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct{ Alert, Record, Expr string }
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(b, &rule))
	var out []query
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			out = append(out, query{"rule/" + r.Alert + r.Record, r.Expr})
		}
	}
	require.GreaterOrEqual(t, len(out), 5, "the alert rules were not found")
	return out
}
