//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"

	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/promscrape"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestExporter: a ValkeyConfig with spec.exporter.enabled gives every pod of a 3x1 cluster
// the exporter sidecar, scraped here at http://<pod IP>:9121/metrics: every server is up and
// the primaries' key counts add up to the keys written. No password is in the pod spec or in
// what Docker records of the sidecar. After an operator password rotation every exporter,
// which read its password when it started, still logs in (its server keeps that one
// password for it) while the operator's and replication's old passwords are refused. A
// replica whose server crashes while its sidecar runs on is replaced. Turning the exporter
// off replaces every node, and the old exporter password goes with the last old pod.
func TestExporter(t *testing.T) {
	n := newNamespace(t, "e2e-exporter")
	const cluster, keys = "exp", 1000
	applyMenu(n)
	cfg := n.name
	n.kubectlIn(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyConfig\nmetadata:\n  name: %s\nspec:\n  imageRef: valkey-8.0\n  resources:\n    cpu: 250m\n    memory: 256Mi\n  exporter:\n    enabled: true\n", cfg), "apply", "-f", "-")
	t.Cleanup(func() { _, _ = kubectlRun("", "delete", "valkeyconfig", cfg, "--wait=false") })
	start := time.Now()
	n.applyCluster(cluster, cfg, 3, 1)
	n.waitState(cluster, "Active", 4*time.Minute)
	n.waitConverged(cluster, 6, 2*time.Minute)
	t.Logf("e2e: 3x1 with exporters Active and converged in %.1fs", time.Since(start).Seconds())

	c := newClient(t, valkey.ClientOption{InitAddress: addrsOf(n.podIPs(cluster)), Password: n.secretValue(cluster+"-auth", "password")})
	ctx, cancel := ctxTimeout(time.Minute)
	defer cancel()
	require.NoError(t, loadgen.Fill(ctx, c, "exp:", keys, 500, nil))
	written := time.Now()
	n.waitExporters(cluster, keys)
	t.Logf("e2e: every exporter reports redis_up 1 and the primaries %d keys %.2fs after the writes", keys, time.Since(written).Seconds())

	pods := n.podsByName(cluster)
	require.Len(t, pods, 6)
	oldOp := n.secretValue(cluster+"-auth", render.AuthOperatorPasswordKey)
	for name, pod := range pods {
		require.Len(t, pod.Spec.Containers, 2, name)
		assert.Equal(t, render.ExporterContainerName, pod.Spec.Containers[1].Name)
		whole, err := json.Marshal(pod)
		require.NoError(t, err)
		seen := n.docker("inspect", "--format", "{{json .Config.Env}} {{json .Config.Cmd}} {{json .Config.Entrypoint}} {{json .Config.Labels}}",
			n.containerNamed(name, render.ExporterContainerName))
		for _, secret := range []string{oldOp, model.ExporterPassword(oldOp), model.ReplicationPassword(oldOp)} {
			assert.NotContains(t, string(whole), secret, "%s: a password in the pod", name)
			assert.NotContains(t, seen, secret, "%s: a password in the sidecar's Docker config", name)
		}
	}

	// The operator password rotates: the exporters started before it keep working.
	newOp := randomPassword(t)
	edited := n.patchSecret(cluster+"-auth", render.AuthOperatorPasswordKey, newOp)
	n.waitOperatorRotated(cluster, oldOp, newOp)
	t.Logf("e2e: the operator password rotated %.2fs after the kubectl patch", time.Since(edited).Seconds())
	n.waitExporterLogins(cluster, map[string]bool{model.ExporterPassword(oldOp): true, model.ExporterPassword(newOp): true})
	n.waitExporters(cluster, keys)

	// A primary's exporter is killed: its supervisor starts it again, and the pod stays Ready
	// and in sync throughout (budgets count Ready pods; pods never restart a container).
	primary := n.nodeWithRole(cluster, "primary")
	exporter := n.containerNamed(primary, render.ExporterContainerName)
	first := n.docker("exec", exporter, "busybox", "pidof", "prometheus-redis-exporter")
	require.NotEmpty(t, first)
	n.docker("exec", exporter, "sh", "-c", "kill -KILL "+first)
	killed := time.Now()
	var unready []string
	n.eventually(time.Minute, 100*time.Millisecond, "a new exporter process in "+primary, func() (bool, string, error) {
		pod, ok := n.podsByName(cluster)[primary]
		if !ok {
			return false, "", fmt.Errorf("%s is gone", primary)
		}
		if !podConditionTrue(pod, corev1.PodReady) || !podConditionTrue(pod, corev1.PodConditionType(render.InSyncCondition)) {
			unready = append(unready, time.Since(killed).Round(time.Millisecond).String())
		}
		now := strings.TrimSpace(n.docker("exec", exporter, "sh", "-c", "busybox pidof prometheus-redis-exporter || true"))
		return now != "" && now != first, "exporter pid " + now, nil
	})
	n.waitExporters(cluster, keys)
	assert.Empty(t, unready, "%s was seen unready or out of sync after its exporter was killed", primary)
	pod := n.podsByName(cluster)[primary]
	for _, cs := range pod.Status.ContainerStatuses {
		assert.Zero(t, cs.RestartCount, "%s: container %s", primary, cs.Name)
		assert.NotNil(t, cs.State.Running, "%s: container %s runs", primary, cs.Name)
	}
	t.Logf("e2e: a killed exporter was started again and serving %.2fs later; its pod stayed Ready", time.Since(killed).Seconds())

	// A replica's server crashes; its sidecar runs on, so the pod stays Running.
	replica := n.nodeWithRole(cluster, "replica")
	sidecar := n.containerNamed(replica, render.ExporterContainerName)
	n.docker("kill", "--signal", "KILL", n.containerNamed(replica, render.ContainerName))
	killed = time.Now()
	assert.Equal(t, "true", strings.TrimSpace(n.docker("inspect", "--format", "{{.State.Running}}", sidecar)), "the sidecar outlives its server")
	n.waitRetired(cluster, replica)
	n.waitConverged(cluster, 6, 2*time.Minute)
	t.Logf("e2e: a replica whose server crashed beside a running sidecar was replaced in %.1fs", time.Since(killed).Seconds())
	n.waitExporters(cluster, keys)

	// Exporter off: every node is replaced by one without it.
	old := n.nodeNames(cluster)
	n.kubectl("patch", "valkeyconfig", cfg, "--type=merge", "-p", `{"spec":{"exporter":{"enabled":false}}}`)
	edited = time.Now()
	n.waitRolled(cluster, old, 6, 5*time.Minute)
	t.Logf("e2e: exporter turned off: every node replaced %.1fs after the kubectl patch", time.Since(edited).Seconds())
	for name, pod := range n.podsByName(cluster) {
		if pod.DeletionTimestamp == nil {
			assert.Len(t, pod.Spec.Containers, 1, "%s runs no exporter", name)
			assert.NotContains(t, pod.Annotations, render.AnnotationExporterPassword, name)
		}
	}
	n.waitExporterLogins(cluster, map[string]bool{model.ExporterPassword(oldOp): false, model.ExporterPassword(newOp): true})
}

// waitExporters waits until the exporter of every pod of the cluster reports redis_up 1 and
// the db0 key counts of the servers that report role master add up to keys (3 of them).
func (n *ns) waitExporters(cluster string, keys int) {
	n.t.Helper()
	n.eventually(time.Minute, 500*time.Millisecond, "every exporter up, the primaries' keys counted", func() (bool, string, error) {
		ips := n.podIPs(cluster)
		primaries, sum := 0, 0.0
		for _, ip := range ips {
			ctx, cancel := ctxTimeout(5 * time.Second)
			m, err := promscrape.Get(ctx, fmt.Sprintf("http://%s:%d/metrics", ip, render.ExporterPort))
			cancel()
			if err != nil {
				return false, err.Error(), nil
			}
			if up, _ := m.Value("redis_up", nil); up != 1 {
				return false, fmt.Sprintf("%s: redis_up %v", ip, up), nil
			}
			if _, master := m.Value("redis_instance_info", map[string]string{"role": "master"}); master {
				primaries++
				got, _ := m.Value("redis_db_keys", map[string]string{"db": "db0"})
				sum += got
			}
		}
		return len(ips) == 6 && primaries == 3 && sum == float64(keys),
			fmt.Sprintf("%d pods, %d primaries holding %v keys", len(ips), primaries, sum), nil
	})
}

// waitExporterLogins is waitLogins for the exporter user, which may not PING: a login is
// proven by INFO, the one command it exists for.
func (n *ns) waitExporterLogins(cluster string, want map[string]bool) {
	n.t.Helper()
	n.eventually(time.Minute, 100*time.Millisecond, "logins of the exporter user on every node", func() (bool, string, error) {
		ips := n.podIPs(cluster)
		for _, ip := range ips {
			for pw, ok := range want {
				err := exporterLogin(ip+":6379", pw)
				if ok && err != nil {
					return false, fmt.Sprintf("%s refuses a password it should accept: %v", ip, err), nil
				}
				if !ok && (err == nil || !strings.Contains(err.Error(), "WRONGPASS")) {
					return false, fmt.Sprintf("%s does not refuse a removed password: %v", ip, err), nil
				}
			}
		}
		return len(ips) > 0, fmt.Sprintf("%d pods", len(ips)), nil
	})
}

// exporterLogin opens a fresh connection to addr as the exporter user and reads INFO server.
func exporterLogin(addr, password string) error {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, Username: model.ExporterUser, Password: password,
		ForceSingleClient: true, DisableCache: true, DisableRetry: true, Dialer: dialer()})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Info().Section("server").Build()).Error()
}

// containerNamed is the ID of the running container called container of a pod.
func (n *ns) containerNamed(pod, container string) string {
	n.t.Helper()
	ids := strings.Fields(n.docker("ps", "-q",
		"--filter", "label="+dockernet.LabelInstance+"="+suite.env.Instance,
		"--filter", "label="+dockernet.LabelPodNamespace+"="+n.name,
		"--filter", "label="+dockernet.LabelPodName+"="+pod,
		"--filter", "label="+dockernet.LabelContainer+"="+container))
	require.Len(n.t, ids, 1, "one running container %s in pod %s", container, pod)
	return ids[0]
}
