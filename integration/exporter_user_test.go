//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/promscrape"
	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestExporterReadsOnlyStatistics: the exporter each local image carries (Debian's 1.45 in
// the 8.0 image, 1.86 in the 9.1 image), run beside each node exactly as the pod's sidecar
// runs (same command line, same password file, in the node's network namespace), logs in as
// the exporter user over plain TCP and over TLS and serves redis_up 1, the cluster state
// (CLUSTER INFO), each server's role and its key count. Every command it sends is allowed but
// SLOWLOG GET, the one refusal its user is meant to meet (its entries hold command
// arguments). Logged in with that password by hand, nothing reaches data, configuration, ACLs
// or the cluster's shape: NOPERM. Over plain TCP the series names served are those of the
// image's fixture in hack/promqlcheck/testdata (matchExporterSeries), which the example
// dashboard is checked against.
func TestExporterReadsOnlyStatistics(t *testing.T) {
	for _, img := range rotationImages {
		for _, withTLS := range []bool{false, true} {
			name := img.name + "/plain"
			if withTLS {
				name = img.name + "/tls"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				exporterOnEveryNode(t, img.name, img.image, withTLS)
			})
		}
	}
}

func exporterOnEveryNode(t *testing.T, name, image string, withTLS bool) {
	const keys = 300
	cfg := harness.Config{Image: image}
	var opts valkeyops.Options
	var tlsCfg *tls.Config
	if withTLS {
		ca, err := testcerts.NewCA("test CA")
		require.NoError(t, err)
		leaf := issue(t, ca, 1)
		cfg.TLS = &harness.TLSFiles{CA: ca.CertPEM, Cert: leaf.CertPEM, Key: leaf.KeyPEM}
		opts.Credentials = valkeyops.Credentials{CA: ca.CertPEM, Cert: leaf.CertPEM, Key: leaf.KeyPEM, ServerName: tlsServerName}
		tlsCfg, err = opts.Credentials.TLSConfig()
		require.NoError(t, err)
	}
	f := newFixture(t, cfg, 1, 2, opts)
	ctx := ctxT(t, 3*time.Minute)
	require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 1))
	snap := waitHealthy(t, f, f.nodes, 1, 1, 30*time.Second)
	primary := snap.Primaries()[0]
	fill(t, dataClient(t, f.nodes, func(o *valkey.ClientOption) { o.TLSConfig = tlsCfg }), "exp:", keys)

	for _, n := range f.nodes {
		op := userClient(t, n, model.OperatorUser, operatorPassword, tlsCfg)
		require.NoError(t, op.Do(ctx, op.B().Arbitrary("ACL", "LOG", "RESET").Build()).Error())
		_, err := f.env.StartSidecar(ctx, n.Name, render.ExporterCommand(withTLS),
			map[string][]byte{render.ExporterPasswordFile: render.ExporterPasswords(operatorPassword)},
			"Providing metrics at")
		require.NoError(t, err, "start the exporter beside %s", n.Name)
	}

	var scrapes []promscrape.Metrics
	for _, n := range f.nodes {
		host, _, err := net.SplitHostPort(n.Addr)
		require.NoError(t, err)
		url := fmt.Sprintf("http://%s:%d/metrics", host, render.ExporterPort)
		wantRole := "slave"
		if n.Name == primary.Name {
			wantRole = "master"
		}
		// The replica's key count catches up with the primary's through replication.
		var m promscrape.Metrics
		require.NoError(t, poll.Until(ctx, 200*time.Millisecond, 30*time.Second, "exporter of "+n.Name+" reports the keys", func(ctx context.Context) (bool, string, error) {
			m, err = promscrape.Get(ctx, url)
			if err != nil {
				return false, err.Error(), nil
			}
			up, _ := m.Value("redis_up", nil)
			got, _ := m.Value("redis_db_keys", map[string]string{"db": "db0"})
			return up == 1 && got == keys, fmt.Sprintf("redis_up %v, db0 keys %v", up, got), nil
		}))
		for _, want := range []struct {
			name   string
			labels map[string]string
			value  float64
		}{
			{"redis_cluster_enabled", nil, 1},                               // INFO
			{"redis_cluster_state", nil, 1},                                 // CLUSTER INFO
			{"redis_cluster_slots_assigned", nil, 16384},                    // CLUSTER INFO
			{"redis_instance_info", map[string]string{"role": wantRole}, 1}, // INFO
		} {
			got, found := m.Value(want.name, want.labels)
			if assert.True(t, found, "%s serves %s%v", n.Name, want.name, want.labels) {
				assert.Equal(t, want.value, got, "%s: %s%v", n.Name, want.name, want.labels)
			}
		}
		_, found := m.Value("redis_slowlog_length", nil) // SLOWLOG LEN; its value is whatever was slow
		assert.True(t, found, "%s serves redis_slowlog_length", n.Name)

		// What the exporter was refused, from the server's own ACL LOG.
		op := userClient(t, n, model.OperatorUser, operatorPassword, tlsCfg)
		entries, err := op.Do(ctx, op.B().Arbitrary("ACL", "LOG").Build()).ToArray()
		require.NoError(t, err)
		refused := map[string]string{}
		for _, e := range entries {
			fields, err := e.AsMap()
			require.NoError(t, err)
			str := func(k string) string {
				v := fields[k]
				s, _ := v.ToString()
				return s
			}
			if str("username") == model.ExporterUser {
				refused[str("object")] = str("reason")
			}
		}
		assert.Equal(t, map[string]string{"slowlog|get": "command"}, refused, "%s: the exporter is refused SLOWLOG GET and nothing else", n.Name)

		// One more scrape for the series list: the first one may precede what the
		// exporter's own earlier scrapes leave in the server's statistics.
		again, err := promscrape.Get(ctx, url)
		require.NoError(t, err)
		scrapes = append(scrapes, m, again)
	}
	if !withTLS {
		matchExporterSeries(t, name, image, scrapes)
	}

	// By hand, with the exporter's password: statistics yes, anything else NOPERM.
	exp := userClient(t, primary.Node, model.ExporterUser, model.ExporterPassword(operatorPassword), tlsCfg)
	do := func(args ...string) error { return exp.Do(ctx, exp.B().Arbitrary(args...).Build()).Error() }
	for _, cmd := range [][]string{
		{"INFO", "ALL"}, {"CLUSTER", "INFO"}, {"LATENCY", "LATEST"}, {"LATENCY", "HISTOGRAM"}, {"SLOWLOG", "LEN"}, {"CLIENT", "SETNAME", "redis_exporter"},
	} {
		assert.NoError(t, do(cmd...), "%v", cmd)
	}
	for _, cmd := range [][]string{
		{"GET", "exp:1"}, {"SET", "exp:1", "x"}, {"DEL", "exp:1"}, {"SCAN", "0"}, {"KEYS", "*"}, {"DBSIZE"}, {"FLUSHALL"},
		{"EVAL", "return 1", "0"}, {"PUBLISH", "ch", "x"},
		{"CONFIG", "GET", "masterauth"}, {"CONFIG", "GET", "*"}, {"CONFIG", "SET", "maxmemory", "1"},
		{"ACL", "LIST"}, {"ACL", "GETUSER", model.OperatorUser}, {"ACL", "SETUSER", model.ExporterUser, "+@all"}, {"ACL", "LOG"},
		{"CLUSTER", "NODES"}, {"CLUSTER", "RESET"}, {"CLUSTER", "FORGET", snap.ReplicasOf(primary.ID)[0].ID}, {"CLUSTER", "FAILOVER"},
		{"CLUSTER", "SETSLOT", "0", "STABLE"}, {"CLUSTER", "MEET", "127.0.0.1", "1"},
		{"REPLICAOF", "127.0.0.1", "1"}, {"SHUTDOWN", "NOSAVE"}, {"MIGRATE", "127.0.0.1", "1", "k", "0", "1"},
		{"SLOWLOG", "GET"}, {"SLOWLOG", "RESET"}, {"LATENCY", "RESET"}, {"CLIENT", "LIST"}, {"CLIENT", "KILL", "ID", "1"},
	} {
		err := do(cmd...)
		if assert.Error(t, err, "%v", cmd) {
			assert.True(t, strings.HasPrefix(err.Error(), "NOPERM"), "%v: %v", cmd, err)
		}
	}
}

// userClient is a single connection to n as user, over TLS when tlsCfg is set.
func userClient(t *testing.T, n model.Node, user, password string, tlsCfg *tls.Config) valkey.Client {
	t.Helper()
	o := valkey.ClientOption{InitAddress: []string{n.Addr}, Username: user, Password: password,
		ForceSingleClient: true, DisableCache: true, DisableRetry: true}
	if tlsCfg != nil {
		o.TLSConfig = tlsCfg.Clone()
	}
	c, err := valkey.NewClient(o)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}
