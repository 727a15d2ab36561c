//go:build envtest

package devcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/devcluster/devtest"
)

// BenchmarkUp measures a cold start of a private dev cluster: seconds until
// the API server answers /readyz and until all six nodes are Ready.
func BenchmarkUp(b *testing.B) {
	var cp, nodes time.Duration
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		env, stop, err := devtest.New(ctx, devtest.Options{})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		cp += env.Cluster.ControlPlaneReady
		nodes += env.Cluster.NodesReady
		b.StopTimer()
		if err := stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(cp.Seconds()/float64(b.N), "controlplane-ready-s")
	b.ReportMetric(nodes.Seconds()/float64(b.N), "nodes-ready-s")
}
