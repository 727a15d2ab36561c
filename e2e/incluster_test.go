//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/promscrape"
)

// operatorDeployment is deploy/40-deployment.yaml's Deployment.
const operatorDeployment = "valkey-operator"

// operatorImage is the image `make image` builds (the Makefile exports IMAGE).
func operatorImage() string {
	if img := os.Getenv("IMAGE"); img != "" {
		return img
	}
	return "valkey-operator:dev"
}

// TestInClusterInstall installs the operator as users do, with `kubectl apply -k` of an
// overlay of deploy/ that moves it into the suite's namespace: the Deployment runs the image
// built from the Dockerfile, two replicas, in-cluster configuration from the pod's projected
// ServiceAccount token, leader election, deploy/'s RBAC and policies. The suite's own operator
// (a host process) stands aside meanwhile, since both would take the same Lease.
//
// It checks that kustomize renders what the suite installs by hand (moveToNamespace), that both
// pods run the local image and turn ready, that one of them leads and forms a cluster, that its
// metrics endpoint reports the cluster, that deleting the leader pod hands over to the other
// replica, which then scales the cluster out, and that neither pod logged a refused request.
func TestInClusterInstall(t *testing.T) {
	image := operatorImage()
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", image).CombinedOutput()
	require.NoError(t, err, "the operator image %s (make image): %s", image, out)
	imageID := strings.TrimSpace(string(out))

	overlay := writeOverlay(t, image)
	rendered, err := kubectlRun("", "kustomize", overlay)
	require.NoError(t, err, rendered)
	assertOverlayMatchesSuite(t, rendered)

	// One operator at a time.
	require.NoError(t, suite.operator.Stop(), "stopping the suite's operator")
	suite.inCluster = true
	t.Cleanup(func() { uninstallDeployment(t) })

	applied := time.Now()
	out2, err := kubectlRun("", "apply", "-k", overlay)
	require.NoError(t, err, out2)
	out2, err = kubectlRun("", "rollout", "status", "deployment/"+operatorDeployment, "-n", operatorNamespace, "--timeout=180s")
	require.NoError(t, err, "the operator's Deployment turns ready: %s\n%s", out2, operatorPodLogs())
	t.Logf("e2e: in-cluster operator ready %.1fs after kubectl apply -k", time.Since(applied).Seconds())

	pods := operatorPods(t)
	require.Len(t, pods, 2, "deploy/ runs two replicas")
	for _, p := range pods {
		assert.Equal(t, image, p.image, "pod %s runs the local image", p.name)
		assert.Equal(t, imageID, p.imageID, "pod %s runs the image just built", p.name)
	}

	n := newNamespace(t, "e2e-incluster")
	const cluster = "incluster"
	leader := leaderPod(n, "")
	t.Logf("e2e: leader %s", leader)
	n.formCluster(cluster, exampleConfig, 1, 0)

	// The leader's metrics endpoint, as a Prometheus scrape through the pod annotations would read it.
	ip := podIPOf(t, leader)
	n.eventually(time.Minute, time.Second, "the leader's metrics report the cluster Active", func() (bool, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := promscrape.Get(ctx, "http://"+net.JoinHostPort(ip, "8080")+"/metrics")
		if err != nil {
			return false, err.Error(), nil
		}
		v, ok := m.Value("valkey_cluster_state", map[string]string{"namespace": n.name, "cluster": cluster, "state": "Active"})
		return ok && v == 1, fmt.Sprintf("valkey_cluster_state Active=%v (found %v)", v, ok), nil
	})

	// Hand-over: a deleted leader pod releases the Lease on its way out; another pod of the
	// install takes it and does the next piece of work.
	deleted := time.Now()
	out2, err = kubectlRun("", "delete", "pod", leader, "-n", operatorNamespace, "--wait=false")
	require.NoError(t, err, out2)
	next := leaderPod(n, leader)
	t.Logf("e2e: %s took the Lease %.1fs after the leader pod was deleted", next, time.Since(deleted).Seconds())
	// Either the standby or the Deployment's replacement pod may win the released Lease
	// (the replacement can start within the standby's 2 s retry period): both are the same
	// install, so which one leads is not asserted, only that it finishes the work.
	t.Logf("e2e: the new leader is the standby: %v", slices.Contains(podNames(pods), next))
	n.patchTopology(cluster, 2, 0)
	n.waitConverged(cluster, 2, 3*time.Minute)
	n.waitState(cluster, "Active", time.Minute)
	events := n.kubectl("get", "events", "--field-selector", "reason=TopologyAction", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	assert.Contains(t, events, "moved", "the new leader's Rebalance Event")

	logs := operatorPodLogs()
	assert.NotContains(t, strings.ToLower(logs), "forbidden", "no request of the in-cluster operator was refused")
	for _, secret := range []string{n.secretValue(cluster+"-auth", "password"), n.secretValue(cluster+"-auth", "operator-password")} {
		assert.NotContains(t, logs, secret, "no password in the operator's log")
	}
}

// writeOverlay writes a kustomization that installs deploy/ into the suite's namespace with
// image, as a user's overlay would (kustomize wants the base as a relative path).
func writeOverlay(t *testing.T, image string) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(suite.root, "deploy"))
	require.NoError(t, err)
	name, tag := image, "latest"
	if i := strings.LastIndexByte(image, ':'); i > 0 && !strings.Contains(image[i:], "/") {
		name, tag = image[:i], image[i+1:]
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
namespace: %s
images:
  - name: valkey-operator
    newName: %s
    newTag: %s
`, base, operatorNamespace, name, tag)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644))
	return dir
}

// assertOverlayMatchesSuite checks that kustomize moves deploy/ into another namespace exactly
// as moveToNamespace does (the subjects and the admission bindings' paramRef included), so an
// overlay's `namespace:` is all a user needs.
func assertOverlayMatchesSuite(t *testing.T, rendered string) {
	t.Helper()
	got, err := decodeObjects(rendered)
	require.NoError(t, err)
	// kubectl's kustomize (5.5) predates ValidatingAdmissionPolicy and takes its kinds for
	// namespaced: it gives them a metadata.namespace, which kubectl drops on apply since the
	// API server says they are cluster-scoped. So they are compared without it.
	clusterScoped := map[string]bool{}
	want, err := readDeploy(suite.root)
	require.NoError(t, err)
	for _, w := range want {
		if w.GetNamespace() == "" {
			clusterScoped[w.GetKind()] = true
		}
	}
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range got {
		if clusterScoped[o.GetKind()] {
			o.SetNamespace("")
		}
		byKey[objectKey(o)] = o
	}
	require.NoError(t, moveToNamespace(want, operatorNamespace))
	for _, w := range want {
		g, ok := byKey[objectKey(w)]
		if assert.True(t, ok, "kustomize renders %s", objectKey(w)) {
			assert.Equal(t, w.Object, g.Object, "kustomize renders %s as the suite installs it", objectKey(w))
		}
	}
	ns, ok := byKey["Namespace//"+operatorNamespace]
	assert.True(t, ok && ns != nil, "the overlay's namespace is the one deploy/ creates")
	_, ok = byKey["Deployment/"+operatorNamespace+"/"+operatorDeployment]
	assert.True(t, ok, "the Deployment moves with it")
}

func objectKey(o *unstructured.Unstructured) string {
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

type managerPod struct{ name, image, imageID string }

func podNames(pods []managerPod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.name)
	}
	return out
}

// operatorPods lists the Deployment's running pods with their container image.
func operatorPods(t *testing.T) []managerPod {
	t.Helper()
	out, err := kubectlRun("", "get", "pods", "-n", operatorNamespace, "-l", "app.kubernetes.io/name=valkey-operator",
		"--field-selector", "status.phase=Running",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.containerStatuses[0].image} {.status.containerStatuses[0].imageID}{"\n"}{end}`)
	require.NoError(t, err, out)
	var pods []managerPod
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			pods = append(pods, managerPod{name: f[0], image: f[1], imageID: f[2]})
		}
	}
	return pods
}

// leaderPod waits until the Lease names an operator pod other than not and returns it
// (controller-runtime's identity is the hostname, the pod's name, and a suffix).
func leaderPod(n *ns, not string) string {
	n.t.Helper()
	var pod string
	n.eventually(time.Minute, 100*time.Millisecond, "an operator pod other than "+not+" leads", func() (bool, string, error) {
		out, err := kubectlRun("", "get", "lease", leaderLease, "-n", operatorNamespace, "-o", "jsonpath={.spec.holderIdentity}")
		if err != nil {
			return false, out, nil
		}
		pod, _, _ = strings.Cut(strings.TrimSpace(out), "_")
		return strings.HasPrefix(pod, operatorDeployment+"-") && pod != not, "holder " + out, nil
	})
	return pod
}

func podIPOf(t *testing.T, pod string) string {
	t.Helper()
	out, err := kubectlRun("", "get", "pod", pod, "-n", operatorNamespace, "-o", "jsonpath={.status.podIP}")
	require.NoError(t, err, out)
	require.NotEmpty(t, strings.TrimSpace(out), "pod %s has an IP", pod)
	return strings.TrimSpace(out)
}

// operatorPodLogs is every operator pod's log (for the checks, and for a failure's context).
func operatorPodLogs() string {
	out, err := kubectlRun("", "logs", "-n", operatorNamespace, "-l", "app.kubernetes.io/name=valkey-operator",
		"--tail=-1", "--prefix", "--max-log-requests=10")
	if err != nil {
		return fmt.Sprintf("(kubectl logs: %v) %s", err, out)
	}
	return out
}

// uninstallDeployment removes what the overlay added beyond the suite's own install (the
// Deployment and the settings ConfigMap), waits until its pods are gone, and starts the
// suite's operator again.
func uninstallDeployment(t *testing.T) {
	if t.Failed() {
		t.Logf("--- in-cluster operator logs:\n%s", operatorPodLogs())
	}
	for _, obj := range []string{"deployment/" + operatorDeployment, "configmap/valkey-operator-config"} {
		if out, err := kubectlRun("", "delete", obj, "-n", operatorNamespace, "--ignore-not-found", "--wait=false"); err != nil {
			t.Errorf("cleanup: %v: %s", err, out)
		}
	}
	if err := poll.Until(context.Background(), 500*time.Millisecond, 2*time.Minute, "operator pods gone", func(context.Context) (bool, string, error) {
		out, err := kubectlRun("", "get", "pods", "-n", operatorNamespace, "-l", "app.kubernetes.io/name=valkey-operator", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", out, nil
	}); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	suite.inCluster = false
	op, err := startOperator(suite.bin, suite.operatorKubeconfig, filepath.Join(suite.tmp, fmt.Sprintf("manager-%d.log", time.Now().UnixNano())))
	if err != nil {
		t.Errorf("cleanup: restarting the suite's operator: %v", err)
		return
	}
	suite.operator = op
}
