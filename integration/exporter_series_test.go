//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/promscrape"
)

// exporterSeriesFixture is where the series names the exporter of image name serves are kept:
// hack/promqlcheck checks the example dashboard's exporter series against these files, so a
// panel cannot name a series that a shipped exporter does not serve.
func exporterSeriesFixture(name string) string {
	return filepath.Join("..", "hack", "promqlcheck", "testdata", "exporter-series-"+name+".txt")
}

// matchExporterSeries compares the series names of scrapes (one primary and one replica with
// keys, so the role-dependent series are all there) with image name's fixture, and with
// UPDATE_FIXTURES=1 rewrites the fixture instead.
func matchExporterSeries(t *testing.T, name, image string, scrapes []promscrape.Metrics) {
	t.Helper()
	got := seriesNames(scrapes)
	path := exporterSeriesFixture(name)
	if os.Getenv("UPDATE_FIXTURES") == "1" {
		header := fmt.Sprintf("# The series names the exporter sidecar of %s serves beside a primary and a\n"+
			"# replica holding keys (written by TestExporterReadsOnlyStatistics with UPDATE_FIXTURES=1).\n", image)
		require.NoError(t, os.WriteFile(path, []byte(header+strings.Join(got, "\n")+"\n"), 0o644))
		t.Logf("wrote %s: %d series", path, len(got))
		return
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err, "no fixture: run this test with UPDATE_FIXTURES=1 to write it")
	var want []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			want = append(want, l)
		}
	}
	var added, gone []string
	for _, s := range got {
		if !slices.Contains(want, s) {
			added = append(added, "+ "+s)
		}
	}
	for _, s := range want {
		if !slices.Contains(got, s) {
			gone = append(gone, "- "+s)
		}
	}
	if len(added)+len(gone) > 0 {
		t.Errorf("the exporter of %s serves other series than %s lists (+ served, not listed; - listed, not served):\n%s\n"+
			"if the change is expected, rewrite it with UPDATE_FIXTURES=1 and check the dashboard still names only served series (make unit)",
			image, path, strings.Join(append(added, gone...), "\n"))
	}
}

// seriesNames lists, sorted, the names PromQL selects in scrapes: a family's own name, and
// for histograms and summaries the _bucket, _sum and _count series the exposition carries.
func seriesNames(scrapes []promscrape.Metrics) []string {
	set := map[string]bool{}
	for _, m := range scrapes {
		for name, f := range m {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				set[name+"_bucket"], set[name+"_sum"], set[name+"_count"] = true, true, true
			case dto.MetricType_SUMMARY:
				set[name], set[name+"_sum"], set[name+"_count"] = true, true, true
			default:
				set[name] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
